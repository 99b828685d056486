package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
)

// fencedPublisher writes one attempt's events to the run's subjects. Every
// publish carries Nats-Expected-Last-Subject-Sequence over the run's wildcard
// (jetrun.run.<id>.>), so once another writer appended an event the next
// publish fails; the publisher then re-reads the row and goes on only if its
// attempt still holds the run. A worker that lost its lease therefore cannot
// append to the run's timeline after the new holder's first event.
//
// Publishes are serialized: chunk order is publish order.
type fencedPublisher struct {
	js      jetstream.JetStream
	stream  jetstream.Stream // the events stream, for last-message lookups
	store   *kv.Store
	ns      events.Namespace
	runID   string
	worker  string
	attempt int

	mu      sync.Mutex
	lastSeq uint64 // sequence of the newest event on the run's subjects
	fenced  bool
}

// publish appends one event and returns its stream sequence.
func (p *fencedPublisher) publish(ctx context.Context, kind, msgID string, v any) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("worker: encode %s event of run %s: %w", kind, p.runID, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fenced {
		return 0, ErrLeaseLost
	}
	subject := p.ns.RunSubject(p.runID, kind)
	for tries := 0; ; tries++ {
		msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
		msg.Header.Set(events.HeaderAttempt, strconv.Itoa(p.attempt))
		ack, err := p.js.PublishMsg(ctx, msg,
			jetstream.WithExpectLastSequenceForSubject(p.lastSeq, p.ns.RunWildcard(p.runID)))
		if err == nil {
			if !ack.Duplicate {
				p.lastSeq = ack.Sequence
			}
			return ack.Sequence, nil
		}
		if !events.IsWrongLastSequence(err) || tries >= 3 {
			return 0, fmt.Errorf("worker: publish %s event of run %s: %w", kind, p.runID, err)
		}
		seq, landed, err := p.refence(ctx, msgID)
		if err != nil {
			return 0, err
		}
		if landed {
			return seq, nil
		}
	}
}

// refence handles a wrong-last-sequence refusal. It reads the newest event
// first and the row second: a takeover that happens in between shows in the
// row, and one that happens after makes the retry fail again.
func (p *fencedPublisher) refence(ctx context.Context, msgID string) (seq uint64, landed bool, err error) {
	var last uint64
	raw, err := p.stream.GetLastMsgForSubject(ctx, p.ns.RunWildcard(p.runID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return 0, false, fmt.Errorf("worker: read last event of run %s: %w", p.runID, err)
	default:
		last = raw.Sequence
		if raw.Header.Get(jetstream.MsgIDHeader) == msgID && raw.Header.Get(events.HeaderAttempt) == strconv.Itoa(p.attempt) {
			p.lastSeq = last // our earlier try landed; its ack was lost
			return last, true, nil
		}
	}
	row, _, err := p.store.Get(ctx, p.runID)
	if err != nil {
		return 0, false, fmt.Errorf("worker: check lease of run %s: %w", p.runID, err)
	}
	if !row.HeldBy(p.worker, p.attempt) || row.Status.Final() {
		p.fenced = true
		return 0, false, ErrLeaseLost
	}
	p.lastSeq = last // another party (a canceller, the reconciler) wrote an event
	return 0, false, nil
}

// fence stops every later publish.
func (p *fencedPublisher) fence() {
	p.mu.Lock()
	p.fenced = true
	p.mu.Unlock()
}

// isFenced reports whether the publisher stopped accepting events.
func (p *fencedPublisher) isFenced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenced
}
