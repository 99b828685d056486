// Package jetruntest holds the shared test kit: NewEnv (an embedded
// JetStream server, a connection, the store and a parent client, as one
// bundle), StartWorker (a worker with its handlers, stopped at cleanup), and
// helpers that read what a user would observe: a run's row and the events
// stored on its subjects.
package jetruntest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Event is one stored run event, decoded by kind.
type Event struct {
	Seq       uint64
	Kind      string
	Attempt   string // the Jetrun-Attempt header
	Header    nats.Header
	Status    *events.StatusEvent
	Chunk     *events.Chunk
	Progress  *events.Progress
	Milestone *events.Milestone
	Step      *events.Step
}

// ReadEvents replays every stored event of run id, in stream order. It reads
// with a plain ordered consumer, as any JetStream client would, not with
// wire.Replay: tests of the replay API compare against it.
func ReadEvents(t testing.TB, js jetstream.JetStream, id string) []Event {
	t.Helper()
	ns := events.Namespace("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, err := wire.RunEventsStream(ctx, js, wire.Namespace(ns), id)
	if err != nil {
		t.Fatalf("jetruntest: events stream of %s: %v", id, err)
	}
	stream, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("jetruntest: bind events stream: %v", err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, ns.RunWildcard(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("jetruntest: last event of %s: %v", id, err)
	}
	c, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{ns.RunWildcard(id)},
	})
	if err != nil {
		t.Fatalf("jetruntest: ordered consumer: %v", err)
	}
	it, err := c.Messages()
	if err != nil {
		t.Fatalf("jetruntest: messages: %v", err)
	}
	defer it.Stop()
	var out []Event
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("jetruntest: read events of %s: %v", id, err)
		}
		meta, _ := msg.Metadata()
		_, kind, _ := wire.Namespace(ns).ParseRunSubject(msg.Subject())
		ev := Event{Seq: meta.Sequence.Stream, Kind: kind, Attempt: msg.Headers().Get(events.HeaderAttempt),
			Header: msg.Headers()}
		var target any
		switch kind {
		case events.KindStatus:
			ev.Status = new(events.StatusEvent)
			target = ev.Status
		case events.KindChunk:
			ev.Chunk = new(events.Chunk)
			target = ev.Chunk
		case events.KindProgress:
			ev.Progress = new(events.Progress)
			target = ev.Progress
		case events.KindMilestone:
			ev.Milestone = new(events.Milestone)
			target = ev.Milestone
		case events.KindStep:
			ev.Step = new(events.Step)
			target = ev.Step
		}
		if target != nil {
			if err := json.Unmarshal(msg.Data(), target); err != nil {
				t.Fatalf("jetruntest: decode %s event %d: %v", kind, ev.Seq, err)
			}
		}
		out = append(out, ev)
		if ev.Seq >= last.Sequence {
			return out
		}
	}
}

// Statuses returns the statuses of the status events, in order.
func Statuses(evs []Event) []events.Status {
	var out []events.Status
	for _, e := range evs {
		if e.Status != nil {
			out = append(out, e.Status.Status)
		}
	}
	return out
}

// ChunkSeqs returns the chunk sequence numbers, in order, each chunk of a
// coalesced chunk event on its own.
func ChunkSeqs(evs []Event) []int64 {
	var out []int64
	for _, e := range evs {
		if e.Chunk != nil {
			for _, c := range e.Chunk.Pieces() {
				out = append(out, c.Seq)
			}
		}
	}
	return out
}

// Chunks returns the chunks stored, in order, each chunk of a coalesced
// chunk event on its own.
func Chunks(evs []Event) []events.Chunk {
	var out []events.Chunk
	for _, e := range evs {
		if e.Chunk != nil {
			out = append(out, e.Chunk.Pieces()...)
		}
	}
	return out
}

// MilestoneSeqs returns the milestone sequence numbers, in order.
func MilestoneSeqs(evs []Event) []int {
	var out []int
	for _, e := range evs {
		if e.Milestone != nil {
			out = append(out, e.Milestone.Sequence)
		}
	}
	return out
}

// Milestones returns the milestone events, in order.
func Milestones(evs []Event) []events.Milestone {
	var out []events.Milestone
	for _, e := range evs {
		if e.Milestone != nil {
			out = append(out, *e.Milestone)
		}
	}
	return out
}

// WaitRow waits until the row of id satisfies cond and returns it.
func WaitRow(t testing.TB, store *runstore.Store, id string, timeout time.Duration, cond func(*model.Row) bool) *model.Row {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *model.Row
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		row, _, err := store.Get(ctx, id)
		cancel()
		if err == nil {
			last = row
			if cond(row) {
				return row
			}
		} else if !errors.Is(err, runstore.ErrRunNotFound) {
			t.Logf("jetruntest: get %s: %v", id, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("jetruntest: run %s did not reach the expected state within %s; last row: %+v", id, timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitAsk waits until the ask id exists and satisfies cond, and returns
// it. A worker stores a wait's ask after the row records the wait, so a
// test that saw the row waiting waits for the ask too.
func WaitAsk(t testing.TB, st *asks.Store, id string, timeout time.Duration, cond func(*events.Ask) bool) *events.Ask {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a, _, err := st.Get(ctx, id)
		cancel()
		if err == nil && cond(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("jetruntest: ask %s did not reach the expected state within %s; last: %+v, %v", id, timeout, a, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Final is a WaitRow condition: the run reached a final status.
func Final(r *model.Row) bool { return r.Status.Final() }

// Settled is a WaitRow condition: the run is final and owes nothing more
// (every finish and notice delivered or given up).
func Settled(r *model.Row) bool { return r.Settled() }

// Delivered is a WaitRow condition: the run reached a final status and the
// finish owed for it was delivered.
func Delivered(r *model.Row) bool { return Final(r) && !r.Delivered[r.Status].IsZero() }

// HasRun reports whether c knows a run id (Inspect finds its row).
func HasRun(ctx context.Context, c *parent.Client, id string) (bool, error) {
	_, err := c.Inspect(ctx, id)
	if errors.Is(err, parent.ErrRunNotFound) {
		return false, nil
	}
	return err == nil, err
}
