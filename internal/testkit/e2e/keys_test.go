package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A child-worker holding the running run of a concurrency key is killed
// with -9. The run is taken over (attempt 2) and finishes; the key is not
// stuck: the runs queued under it then run in order, each starting only
// after the one before it ended (checked on the events stream, not with
// clocks), so nothing ran twice at once under the key.
func TestKilledWorkerHoldingAConcurrencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.childWorker(t, "child-a", nil)
	submitUnder := func(key string, strategy events.Strategy, id string, steps int) {
		t.Helper()
		_, err := e.client.Dispatch(context.Background(), parent.Request{
			AgentType: demo.AgentType, RunID: id, Input: map[string]int{"steps": steps, "stepMs": 150},
			ConcurrencyKey: key, Strategy: strategy,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	submit := func(id string, steps int) { submitUnder("session-1", events.StrategyQueue, id, steps) }
	submit("key-0", 20)
	// A second key, strategy latest, whose holder dies too.
	submitUnder("session-2", events.StrategyLatest, "latest-0", 20)
	for _, id := range []string{"key-0", "latest-0"} {
		jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.Worker == "child-a" })
	}
	e.childWorker(t, "child-b", nil)
	ids := []string{"key-0", "key-1", "key-2", "key-3"}
	for _, id := range ids[1:] {
		submit(id, 3)
		if r, _ := e.client.Inspect(context.Background(), id); r.Status != events.StatusQueued {
			t.Fatalf("%s: %s, want queued behind key-0", id, r.Status)
		}
	}
	for _, id := range []string{"latest-1", "latest-2", "latest-3"} {
		submitUnder("session-2", events.StrategyLatest, id, 3)
	}
	for _, id := range []string{"key-0", "latest-0"} {
		jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.Milestones >= 3 })
	}
	a.kill()

	for _, id := range []string{"latest-1", "latest-2"} {
		r := jetruntest.WaitRow(t, e.store, id, 60*time.Second, jetruntest.Final)
		if r.Status != events.StatusAborted || r.Reason != events.ReasonSuperseded || r.SupersededBy == "" {
			t.Fatalf("%s: %s/%s by %q; want superseded by a newer submit", id, r.Status, r.Reason, r.SupersededBy)
		}
	}
	assertSerial(t, e, []string{"latest-0", "latest-3"}, "latest-0")

	assertSerial(t, e, ids, "key-0")

	// A run that waited queued: its history starts at its "queued" event.
	for _, id := range ids[1:] {
		seq, err := e.client.Replay(context.Background(), id, parent.ReplayOptions{Follow: events.HistoryOnly, Kinds: []string{events.KindStatus}})
		if err != nil {
			t.Fatal(err)
		}
		var statuses []events.Status
		for ev, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			statuses = append(statuses, ev.Status.Status)
		}
		if fmt.Sprint(statuses) != "[queued running completed]" {
			t.Errorf("%s: replayed statuses %v, want [queued running completed]", id, statuses)
		}
	}
}

// assertSerial waits for the runs ids of one key to complete, the one
// named killed after a takeover, and checks on the events stream that each
// started only after the one before it ended.
func assertSerial(t *testing.T, e *env, ids []string, killed string) {
	t.Helper()
	for _, id := range ids {
		r := jetruntest.WaitRow(t, e.store, id, 120*time.Second, jetruntest.Final)
		if r.Status != events.StatusCompleted {
			t.Fatalf("%s ended %s: %s", id, r.Status, r.Error)
		}
		if id == killed && r.Attempt != 2 {
			t.Fatalf("%s: attempt %d, want 2 (taken over)", id, r.Attempt)
		}
	}
	var prevEnd uint64
	for _, id := range ids {
		evs := waitFinalEvent(t, e.js, id)
		var firstRunning, end uint64
		for _, ev := range evs {
			switch {
			case ev.Status == nil:
			case ev.Status.Status == events.StatusRunning && firstRunning == 0:
				firstRunning = ev.Seq
			case ev.Status.Status.Final():
				end = ev.Seq
			}
		}
		if firstRunning == 0 || firstRunning < prevEnd {
			t.Fatalf("%s started at event %d, before the run ahead of it ended (event %d): %v",
				id, firstRunning, prevEnd, fmt.Sprint(jetruntest.Statuses(evs)))
		}
		prevEnd = end
	}
}
