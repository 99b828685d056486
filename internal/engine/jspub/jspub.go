// Package jspub publishes a message to JetStream and waits for the
// stream's acknowledgement, as jetstream.JetStream.PublishMsg does, but
// reads the acknowledgement without reflection. The synchronous writes on a
// run's path (the row's compare-and-sets, status events) spent about a
// tenth of a short run's CPU in encoding/json decoding PubAcks (and growing
// fresh goroutine stacks for it); an acknowledgement is a flat object of a
// few known fields, read here in a single pass. Anything else (an API
// error, a field this package does not know) is decoded in full.
package jspub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publish sends m to the stream that holds its subject, on js's
// connection, and returns the stream's acknowledgement. It behaves as
// js.PublishMsg(ctx, m): a ctx without a deadline gets js's default
// timeout (a stream without a leader answers nothing at all), and the
// errors are the same: a refusal wraps *jetstream.APIError (so
// errors.Is(err, jetstream.ErrKeyExists) and the like work); no stream
// answering, after the same retries, is jetstream.ErrNoStreamResponse; an
// answer that is not an acknowledgement is jetstream.ErrInvalidJSAck.
func Publish(ctx context.Context, js jetstream.JetStream, m *nats.Msg) (*jetstream.PubAck, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, js.Options().DefaultTimeout)
		defer cancel()
	}
	nc := js.Conn()
	resp, err := nc.RequestMsgWithContext(ctx, m)
	for try := 0; errors.Is(err, nats.ErrNoResponders) && try < jetstream.DefaultPubRetryAttempts; try++ {
		// A leader election: the stream answers again shortly.
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, jetstream.ErrNoStreamResponse
		case <-t.C:
		}
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return nil, err
	}
	return DecodeAck(resp.Data)
}

// DecodeAck reads a stream's answer to a publish.
func DecodeAck(data []byte) (*jetstream.PubAck, error) {
	if ack, ok := scan(data); ok {
		return ack, nil
	}
	var resp struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("nats: %w", resp.Error)
	}
	if resp.PubAck == nil || resp.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return resp.PubAck, nil
}

// scan reads an acknowledgement made only of the fields a plain publish
// gets back: {"stream":"S","seq":N} with "duplicate", "domain" or "val"
// perhaps. ok is false for anything else (an error, a field it does not
// know, an escaped string), which the caller then decodes in full.
func scan(data []byte) (ack *jetstream.PubAck, ok bool) {
	s := bytes.TrimSpace(data)
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, false
	}
	s = s[1 : len(s)-1]
	ack = &jetstream.PubAck{}
	for len(s) > 0 {
		var key, val []byte
		if key, s, ok = quoted(skipSpace(s)); !ok {
			return nil, false
		}
		if s = skipSpace(s); len(s) == 0 || s[0] != ':' {
			return nil, false
		}
		s = skipSpace(s[1:])
		switch string(key) {
		case "stream", "domain", "val":
			if val, s, ok = quoted(s); !ok {
				return nil, false
			}
			switch string(key) {
			case "stream":
				ack.Stream = string(val)
			case "domain":
				ack.Domain = string(val)
			default:
				ack.Value = string(val)
			}
		case "seq":
			n := 0
			for n < len(s) && s[n] >= '0' && s[n] <= '9' {
				n++
			}
			seq, err := strconv.ParseUint(string(s[:n]), 10, 64)
			if err != nil {
				return nil, false
			}
			ack.Sequence, s = seq, s[n:]
		case "duplicate":
			switch {
			case bytes.HasPrefix(s, []byte("true")):
				ack.Duplicate, s = true, s[4:]
			case bytes.HasPrefix(s, []byte("false")):
				s = s[5:]
			default:
				return nil, false
			}
		default:
			return nil, false
		}
		if s = skipSpace(s); len(s) > 0 {
			if s[0] != ',' || len(skipSpace(s[1:])) == 0 {
				return nil, false
			}
			s = s[1:]
		}
	}
	return ack, ack.Stream != ""
}

// quoted reads a JSON string without escapes at the start of s.
func quoted(s []byte) (val, rest []byte, ok bool) {
	if len(s) == 0 || s[0] != '"' {
		return nil, nil, false
	}
	end := bytes.IndexByte(s[1:], '"')
	if end < 0 {
		return nil, nil, false
	}
	val = s[1 : 1+end]
	if bytes.IndexByte(val, '\\') >= 0 {
		return nil, nil, false
	}
	return val, s[2+end:], true
}

func skipSpace(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	return s
}
