package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A worker killed with -9 right after its attempt made a call, before its
// row recorded where the run's events begin (its row sync is an hour
// here): the run's history still starts at attempt 1's first event. The
// takeover waits for attempt 1's call, Calls lists it, answering it by
// hand completes the run, and a replay shows both attempts.
func TestKilledFirstAttemptStaysInTheRunsHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := e.nestWorker(t, "early-a", "1h")
	const id = "early-1"
	if _, err := e.client.Dispatch(ctx, parent.Request{AgentType: "caller", RunID: id, Input: map[string]string{"q": "x"}}); err != nil {
		t.Fatal(err)
	}
	stream, err := e.js.Stream(ctx, wire.Namespace(events.Namespace("")).EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	callSubject := events.Namespace("").RunSubject(id, events.KindCall)
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := stream.GetLastMsgForSubject(ctx, callSubject)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) || time.Now().After(deadline) {
			t.Fatalf("attempt 1's call is not stored: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.kill()
	if row, _, err := e.store.Get(ctx, id); err != nil || row.FirstEventSeq != 0 || row.Attempt != 1 {
		t.Fatalf("before the takeover: row %+v %v; want attempt 1 without firstEventSeq", row, err)
	}
	firstSeq := jetruntest.ReadEvents(t, e.js, id)[0].Seq

	e.nestWorker(t, "early-b")
	row := jetruntest.WaitRow(t, e.store, id, 60*time.Second, func(r *model.Row) bool {
		return r.Attempt == 2 && r.WaitingFor == "call:ask"
	})
	if row.FirstEventSeq != firstSeq {
		t.Errorf("firstEventSeq %d after the takeover, want %d (attempt 1's running)", row.FirstEventSeq, firstSeq)
	}
	calls, err := e.client.Calls(ctx, id)
	if err != nil || len(calls) != 1 || calls[0].Call.Attempt != 1 || calls[0].Reply != nil {
		t.Fatalf("calls %+v %v; want attempt 1's call, unanswered", calls, err)
	}
	if _, err := e.client.Answer(ctx, id, calls[0].Call.Seq, map[string]string{"by": "hand"}, ""); err != nil {
		t.Fatal(err)
	}
	row = jetruntest.WaitRow(t, e.store, id, 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || string(row.Output) != `{"answer":{"by":"hand"},"attempt":2}` {
		t.Fatalf("caller: %s (%s) %s", row.Status, row.Error, row.Output)
	}

	// The row is final before its status event is stored (docs/leases.md):
	// follow the run until its end rather than read the history at once.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	seq, err := e.client.Replay(rctx, id, parent.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for ev, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Status != nil:
			got = append(got, fmt.Sprintf("%s@%d", ev.Status.Status, ev.Attempt))
		case ev.Call != nil:
			got = append(got, fmt.Sprintf("call@%d", ev.Attempt))
		case ev.Reply != nil:
			got = append(got, "reply")
		}
	}
	want := []string{"running@1", "call@1", "running@2", "reply", "completed@2"}
	if !slices.Equal(got, want) {
		t.Errorf("replay %v, want %v", got, want)
	}
}
