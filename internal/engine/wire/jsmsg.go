package wire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// DeadLetter builds the dead-letter copy of msg, to publish on subject: the
// original payload and headers, the reason, and where the message came from.
// Its Nats-Msg-Id is derived from the original's stream position, so a
// retried dead-letter write is stored once. The original's server headers
// (Nats-*) do not travel: they must not steer the dead-letter write.
func DeadLetter(subject string, msg jetstream.Msg, reason string) *nats.Msg {
	dlq := &nats.Msg{Subject: subject, Data: msg.Data(), Header: nats.Header{}}
	for k, vs := range msg.Headers() {
		if !strings.HasPrefix(k, "Nats-") {
			dlq.Header[k] = vs
		}
	}
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		dlq.Header.Set(events.HeaderOriginalMsgID, HeaderValue(id))
	}
	dlq.Header.Set(events.HeaderReason, HeaderValue(reason))
	dlq.Header.Set(events.HeaderOriginalSubject, msg.Subject())
	if meta, err := msg.Metadata(); err == nil {
		seq := strconv.FormatUint(meta.Sequence.Stream, 10)
		dlq.Header.Set(events.HeaderOriginalSequence, seq)
		dlq.Header.Set(jetstream.MsgIDHeader, "dlq-"+meta.Stream+"-"+seq)
	}
	return dlq
}

// Truncate shortens s to at most n bytes, marking the cut with an ellipsis.
// It never cuts a UTF-8 sequence in two.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && cut > n-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// maxHeaderValue bounds a header value HeaderValue builds, in bytes.
const maxHeaderValue = 1024

// HeaderValue makes s safe as a NATS header value: valid UTF-8 (an invalid
// byte is written as \xNN), no control characters (a line break would end
// the header; they are written as \n, \r, \t or \xNN), at most about
// 1 KiB.
func HeaderValue(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < maxHeaderValue; {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r == '\n':
			b.WriteString("\\n")
		case r == '\r':
			b.WriteString("\\r")
		case r == '\t':
			b.WriteString("\\t")
		case unicode.IsControl(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return Truncate(b.String(), maxHeaderValue)
}

// StreamSeq is msg's sequence in its stream (0 if unknown).
func StreamSeq(msg jetstream.Msg) uint64 {
	meta, err := msg.Metadata()
	if err != nil {
		return 0
	}
	return meta.Sequence.Stream
}

// IsWrongLastSequence reports whether err is the server refusing a publish
// whose expected last sequence no longer holds (10071 on R1, 10164 on R3).
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// IsSubjectInProcess reports whether err is a clustered stream refusing a
// publish because another message checked against the same subject's last
// sequence is still being stored (10164, "last sequence by subject
// mismatch" without a sequence): a clustered leader lets one such message
// per subject be in process at a time. It is not a mismatch yet: once the
// other one is stored, the same publish is checked again for real.
// IsWrongLastSequence is true for it too.
func IsSubjectInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// WithMetadata returns msg with its metadata parsed once, now: every
// later Metadata call answers from it (the same value: read-only). A
// delivery's metadata is read several times on a run's way (its sequence,
// its delivery count, when it was stored), and jetstream.Msg parses its
// reply subject anew at each call.
func WithMetadata(msg jetstream.Msg) jetstream.Msg {
	if _, ok := msg.(*metaMsg); ok {
		return msg
	}
	meta, err := msg.Metadata()
	return &metaMsg{Msg: msg, meta: meta, err: err}
}

// metaMsg is a jetstream.Msg whose metadata was parsed once.
type metaMsg struct {
	jetstream.Msg
	meta *jetstream.MsgMetadata
	err  error
}

// Metadata returns the metadata parsed by WithMetadata, or its error.
func (m *metaMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.err != nil {
		return nil, m.err
	}
	return m.meta, nil
}
