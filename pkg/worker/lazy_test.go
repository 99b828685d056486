package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// rowStatuses follows the row of run id from before it exists and returns
// a function that waits until the row is final and returns every status
// it was stored with, one per write, in order.
func rowStatuses(t *testing.T, js jetstream.JetStream, id string) func() []events.Status {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kv, err := js.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return func() []events.Status {
		t.Helper()
		var got []events.Status
		timeout := time.After(20 * time.Second)
		for {
			select {
			case e := <-w.Updates():
				if e == nil {
					continue // the end of the (empty) history
				}
				var r struct{ Status events.Status }
				if err := json.Unmarshal(e.Value(), &r); err != nil {
					t.Fatalf("row of %s: %v", id, err)
				}
				if got = append(got, r.Status); r.Status.Final() {
					return got
				}
			case <-timeout:
				t.Fatalf("run %s not final; row writes so far: %v", id, got)
			}
		}
	}
}

// A short run (its handler returns at once and asks its Run for nothing)
// stores its ending only: one row write (created final, for a plain
// publish; one compare-and-set over the client's row), and one status
// event carrying its attempt and its start. Before the claim window a
// plain publish's run was stored claimed, then final, with a "running" and
// a final status event.
func TestAShortRunStoresItsEndingOnly(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("short", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "done", Output: run.Attempt()}, nil
		})
	})

	plain := rowStatuses(t, env.JS, "plain")
	publish(t, env.JS, "jetrun.dispatch.short", `{"runId":"plain","input":{}}`)
	if got := fmt.Sprint(plain()); got != "[completed]" {
		t.Fatalf("plain publish: row writes %s, want [completed]", got)
	}

	client := rowStatuses(t, env.JS, "client")
	if _, err := env.Client.Dispatch(context.Background(), parent.Request{AgentType: "short", RunID: "client", Input: 1}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(client()); got != "[starting completed]" {
		t.Fatalf("client dispatch: row writes %s, want [starting completed]", got)
	}

	for _, id := range []string{"plain", "client"} {
		row := jetruntest.WaitRow(t, env.Store, id, 10*time.Second, jetruntest.Final)
		evs := waitForStatus(t, env.JS, id, events.StatusCompleted)
		if got := fmt.Sprint(jetruntest.Statuses(evs)); got != "[completed]" {
			t.Fatalf("%s: status events %s, want [completed]", id, got)
		}
		st := evs[0].Status
		if row.Attempt != 1 || string(row.Output) != "1" || row.Worker != "" || row.StartedAt.IsZero() ||
			row.StartedAt.Before(row.CreatedAt) || row.FinishedAt.Before(row.StartedAt) {
			t.Fatalf("%s: row attempt %d output %s worker %q created %v started %v finished %v", id,
				row.Attempt, row.Output, row.Worker, row.CreatedAt, row.StartedAt, row.FinishedAt)
		}
		if st.Attempt != 1 || !st.StartedAt.Equal(row.StartedAt) {
			t.Fatalf("%s: status event attempt %d startedAt %v, row's start %v", id, st.Attempt, st.StartedAt, row.StartedAt)
		}
	}
	drained(t, env.JS, "short")
}

// A handler that emits within the claim window claims its run first: the
// row is claimed before its event is stored, and the timeline is the
// usual one.
func TestAShortRunThatEmitsClaimsFirst(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("chatty", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "done"}, run.Chunk(ctx, "hello")
		})
	})
	// Its "running" status event (kept by the events stream, where a
	// watch of the runs bucket, one revision a key, may skip a write) is
	// the claim's.
	publish(t, env.JS, "jetrun.dispatch.chatty", `{"runId":"chat","input":{}}`)
	evs := waitForStatus(t, env.JS, "chat", events.StatusCompleted)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if got := fmt.Sprint(kinds); got != "[status chunk status]" {
		t.Fatalf("events %s, want [status chunk status]", got)
	}
	if got := fmt.Sprint(jetruntest.Statuses(evs)); got != "[running completed]" {
		t.Fatalf("statuses %s", got)
	}
	row := jetruntest.WaitRow(t, env.Store, "chat", 10*time.Second, jetruntest.Final)
	if row.FirstEventSeq != evs[0].Seq || row.Chunks != 1 {
		t.Fatalf("row firstEventSeq %d chunks %d, want %d and 1", row.FirstEventSeq, row.Chunks, evs[0].Seq)
	}
}

// A handler that runs past the claim window claims its run when the window
// passes, without emitting anything: the row shows it running (and the
// timeline its start) while it waits.
func TestAHandlerPastTheClaimWindowClaimsTheRun(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	release := make(chan struct{})
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("slow", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			select {
			case <-release:
				return worker.Result{Summary: "done"}, nil
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		})
	})
	statuses := rowStatuses(t, env.JS, "slow")
	publish(t, env.JS, "jetrun.dispatch.slow", `{"runId":"slow","input":{}}`)
	row := jetruntest.WaitRow(t, env.Store, "slow", 10*time.Second, running)
	if row.Attempt != 1 || row.Worker == "" {
		t.Fatalf("claimed row: attempt %d worker %q", row.Attempt, row.Worker)
	}
	waitForStatus(t, env.JS, "slow", events.StatusRunning)
	close(release)
	if got := fmt.Sprint(statuses()); got != "[running completed]" {
		t.Fatalf("row writes %s, want [running completed]", got)
	}
	evs := waitForStatus(t, env.JS, "slow", events.StatusCompleted)
	if got := fmt.Sprint(jetruntest.Statuses(evs)); got != "[running completed]" {
		t.Fatalf("statuses %s", got)
	}
}

// A negative window claims every run at its start, as before.
func TestANegativeClaimWindowClaimsAtOnce(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	env.StartWorker(t, worker.Config{ClaimWindow: -1}, func(w *worker.Worker) {
		w.HandleFunc("short", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, nil
		})
	})
	publish(t, env.JS, "jetrun.dispatch.short", `{"runId":"eager","input":{}}`)
	// Claimed at its start: a "running" status event, which a run that
	// ends within the window has not (the events stream keeps every one;
	// a watch of the runs bucket, one revision a key, may skip a write).
	evs := waitForStatus(t, env.JS, "eager", events.StatusCompleted)
	if got := fmt.Sprint(jetruntest.Statuses(evs)); got != "[running completed]" {
		t.Fatalf("status events %s, want [running completed]", got)
	}
}

// A step's work runs only in an attempt that holds its run: an attempt
// that has not claimed its run (the claim window) claims it before the
// step's function runs, so an unclaimed attempt that does not own the run
// (a duplicate dispatch, a row read from a replica that was behind) never
// does the work. Before, the work ran first and the claim came as the step
// was stored: the nemesis saw a step's work run twice in attempt 1.
func TestAStepsWorkRunsOnlyOnceItsRunIsClaimed(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	seen := make(chan string, 1)
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("stepper", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			_, err := run.Step(ctx, "s1", func(ctx context.Context) (any, error) {
				row, _, err := env.Store.Lookup(ctx, run.ID())
				if err != nil {
					seen <- err.Error()
					return nil, nil
				}
				seen <- fmt.Sprintf("%s attempt %d", row.Status, row.Attempt)
				return nil, nil
			})
			return worker.Result{Summary: "done"}, err
		})
	})
	publish(t, env.JS, "jetrun.dispatch.stepper", `{"runId":"st1","input":{}}`)
	if got := <-seen; got != "running attempt 1" {
		t.Fatalf("the step's work ran with the run's row %q, want it claimed (running attempt 1)", got)
	}
	if row := jetruntest.WaitRow(t, env.Store, "st1", 20*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
		t.Fatalf("run st1 ended %s (%s)", row.Status, row.Error)
	}
}
