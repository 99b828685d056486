// Package jspub publishes messages to JetStream and waits for each
// stream's acknowledgement, as jetstream.JetStream.PublishMsg does, but
// cheaper, for the synchronous writes on a run's path (the row's
// compare-and-sets, status events) and its row reads:
//
//   - A Publisher waits for its answers on a reply subscription of its own,
//     under its own lock. nats.go's requests share the connection's: their
//     reply handler takes the lock that every publish and the connection's
//     reader take too, and with a worker's 64 runs each waiting for one
//     answer the queue for it cost more than the round trips (bare nats.go
//     making a short run's round trips works 10,000 runs down at 0.044 of
//     raw async publish through its requests, 0.077 through a reply
//     subscription of its own: BenchmarkWorkloadBareRoundTrips).
//   - An acknowledgement is read without reflection: it is a flat object
//     of a few known fields, read in a single pass (decoding them with
//     encoding/json was about a tenth of a short run's CPU). Anything else
//     (an API error, a field this package does not know) is decoded in
//     full.
package jspub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes on one connection and waits for the answers. It is
// safe for concurrent use. Its reply subscription lives until Close or
// until the connection closes.
type Publisher struct {
	nc      *nats.Conn
	timeout time.Duration // for a ctx without a deadline
	prefix  string        // of the reply subjects: an inbox of its own and "."
	sub     *nats.Subscription
	closed  chan struct{} // closed when sub ends (Close, or the connection closing)

	mu      sync.Mutex
	next    uint64
	waiting map[string]chan *nats.Msg // by the reply subject's last token
}

// New subscribes a Publisher's replies on js's connection. A publish or
// request whose ctx has no deadline gets js's default timeout (a stream
// without a leader answers nothing at all).
func New(js jetstream.JetStream) (*Publisher, error) {
	nc := js.Conn()
	p := &Publisher{
		nc:      nc,
		timeout: js.Options().DefaultTimeout,
		prefix:  nc.NewInbox() + ".",
		closed:  make(chan struct{}),
		waiting: make(map[string]chan *nats.Msg),
	}
	sub, err := nc.Subscribe(p.prefix+"*", p.deliver)
	if err != nil {
		return nil, fmt.Errorf("jspub: subscribe replies: %w", err)
	}
	sub.SetClosedHandler(func(string) { close(p.closed) })
	p.sub = sub
	return p, nil
}

// Close ends the reply subscription; requests still waiting end with
// nats.ErrConnectionClosed.
func (p *Publisher) Close() error {
	if err := p.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		return fmt.Errorf("jspub: unsubscribe replies: %w", err)
	}
	return nil
}

// deliver hands a reply to the request waiting for it. A reply nobody
// waits for (its request gave up) is dropped.
func (p *Publisher) deliver(m *nats.Msg) {
	token := m.Subject[len(p.prefix):]
	p.mu.Lock()
	ch := p.waiting[token]
	delete(p.waiting, token)
	p.mu.Unlock()
	if ch != nil {
		ch <- m // buffered, and only one reply is delivered per token
	}
}

// Request sends m (its Reply is set here) and returns the answer, as
// nc.RequestMsgWithContext does: a ctx without a deadline gets the default
// timeout; a subject nobody serves is nats.ErrNoResponders.
func (p *Publisher) Request(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan *nats.Msg, 1)
	p.mu.Lock()
	p.next++
	token := strconv.FormatUint(p.next, 36)
	p.waiting[token] = ch
	p.mu.Unlock()
	forget := func() {
		p.mu.Lock()
		delete(p.waiting, token)
		p.mu.Unlock()
	}
	m.Reply = p.prefix + token
	if err := p.nc.PublishMsg(m); err != nil {
		forget()
		return nil, err
	}
	select {
	case r := <-ch:
		if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return r, nil
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	case <-p.closed:
		forget()
		return nil, nats.ErrConnectionClosed
	}
}

// Pending is a request on its way (Send): its answer is read by Wait.
type Pending struct {
	p     *Publisher
	token string
	ch    chan *nats.Msg
	err   error // the send's failure
}

// Send sends m (its Reply is set here) without waiting for the answer:
// many requests sent one after another are on the connection at once, and
// their answers are read together, each by its Pending's Wait. Every
// Pending must be waited for (or the Publisher closed), else its slot is
// kept.
func (p *Publisher) Send(m *nats.Msg) *Pending {
	ch := make(chan *nats.Msg, 1)
	p.mu.Lock()
	p.next++
	token := strconv.FormatUint(p.next, 36)
	p.waiting[token] = ch
	p.mu.Unlock()
	q := &Pending{p: p, token: token, ch: ch}
	m.Reply = p.prefix + token
	if err := p.nc.PublishMsg(m); err != nil {
		q.forget()
		q.err = err
	}
	return q
}

func (q *Pending) forget() {
	q.p.mu.Lock()
	delete(q.p.waiting, q.token)
	q.p.mu.Unlock()
}

// Wait returns the answer to the request, as Request does: a ctx without a
// deadline gets the default timeout (from now); a subject nobody serves is
// nats.ErrNoResponders.
func (q *Pending) Wait(ctx context.Context) (*nats.Msg, error) {
	if q.err != nil {
		return nil, q.err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, q.p.timeout)
		defer cancel()
	}
	select {
	case r := <-q.ch:
		if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return r, nil
	case <-ctx.Done():
		q.forget()
		return nil, ctx.Err()
	case <-q.p.closed:
		q.forget()
		return nil, nats.ErrConnectionClosed
	}
}

// Ack waits for the answer to a publish sent by Send and reads it as
// Publish does, but once: no stream answering is
// jetstream.ErrNoStreamResponse at once (the caller, which pipelines many
// publishes, retries the few that need it by Publish).
func (q *Pending) Ack(ctx context.Context) (*jetstream.PubAck, error) {
	resp, err := q.Wait(ctx)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return nil, err
	}
	return DecodeAck(resp.Data)
}

// Publish sends m to the stream that holds its subject and returns the
// stream's acknowledgement. It behaves as js.PublishMsg(ctx, m): a ctx
// without a deadline gets js's default timeout, and the errors are the
// same: a refusal wraps *jetstream.APIError (so errors.Is(err,
// jetstream.ErrKeyExists) and the like work); no stream answering, after
// the same retries, is jetstream.ErrNoStreamResponse; an answer that is not
// an acknowledgement is jetstream.ErrInvalidJSAck.
func (p *Publisher) Publish(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	resp, err := p.Request(ctx, m)
	for try := 0; errors.Is(err, nats.ErrNoResponders) && try < jetstream.DefaultPubRetryAttempts; try++ {
		// A leader election: the stream answers again shortly.
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, jetstream.ErrNoStreamResponse
		case <-t.C:
		}
		resp, err = p.Request(ctx, m)
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
