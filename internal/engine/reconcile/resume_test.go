package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A detached run given up by its budget, its finish delivered (so it left
// the active-run index), is retried by each way there is to retry a run.
// Each resumes it as attempt 2 and puts it back in the index: its budget
// is enforced again, and its finish handler hears the second give-up too,
// under its own idempotency key.
func TestEveryRetryOfAGivenUpRunIsSweptAndItsSecondEndingAnnounced(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	input := map[string]int{"steps": 40, "stepMs": 250} // 10 s under a 1.5 s budget
	retries := []struct {
		name  string
		key   string // the run's concurrency key
		retry func(ctx context.Context, id string) error
	}{
		{"dispatch", "", func(ctx context.Context, id string) error {
			_, err := e.client.Dispatch(ctx, parent.Request{AgentType: demo.AgentType, RunID: id, Input: input})
			return err
		}},
		{"run", "", func(ctx context.Context, id string) error {
			_, err := e.client.Run(ctx, parent.Request{AgentType: demo.AgentType, RunID: id, Input: input})
			var f *parent.Failure
			if errors.As(err, &f) && f.Status == events.StatusInterrupted {
				return nil // given up again: what this test wants
			}
			return fmt.Errorf("run: %v, want the second give-up", err)
		}},
		{"capped", "", func(ctx context.Context, id string) error {
			_, err := e.client.Dispatch(ctx, parent.Request{AgentType: demo.AgentType, RunID: id, Input: input,
				Parent: "boss", MaxConcurrent: 5})
			return err
		}},
		{"keyed", "k-resume", func(ctx context.Context, id string) error {
			_, err := e.client.Dispatch(ctx, parent.Request{AgentType: demo.AgentType, RunID: id, Input: input,
				ConcurrencyKey: "k-resume"})
			return err
		}},
		{"publish", "", func(ctx context.Context, id string) error {
			data, err := json.Marshal(events.Dispatch{RunID: id, Input: json.RawMessage(`{"steps": 40, "stepMs": 250}`)})
			if err != nil {
				return err
			}
			return e.nc.Publish(events.Namespace("").DispatchSubject(demo.AgentType), data)
		}},
	}
	for _, rt := range retries {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			id := "resume-" + rt.name
			det := events.Detached{OnFinish: "record", MaxBudgetMs: 1500}
			req := parent.Request{AgentType: demo.AgentType, RunID: id, Input: input, Detached: &det}
			req.ConcurrencyKey = rt.key
			if _, err := e.client.Dispatch(ctx, req); err != nil {
				t.Fatal(err)
			}
			givenUp := func(r *model.Row) bool {
				return r.Status == events.StatusInterrupted && !r.ChildStillRunning && r.Settled()
			}
			row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, givenUp)
			if row.Attempt != 1 || row.Reason != events.ReasonBudgetExceeded {
				t.Fatalf("first give-up: %+v", row)
			}
			waitDeliveries(t, e.rec, id, 1)
			natstest.Eventually(t, 10*time.Second, func() bool { return !indexed(t, e, id) },
				"%s stays in the active-run index once settled", id)

			if err := rt.retry(ctx, id); err != nil {
				t.Fatal(err)
			}
			row = jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool {
				return r.Attempt == 2 && (r.Status == events.StatusRunning || r.Status == events.StatusInterrupted)
			})
			if row.Unindexed {
				t.Errorf("resumed row says unindexed")
			}
			row = jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool {
				return r.Attempt == 2 && givenUp(r)
			})
			if row.Reason != events.ReasonBudgetExceeded || row.Milestones >= 40 {
				t.Fatalf("second give-up: %+v", row)
			}
			got := waitDeliveries(t, e.rec, id, 2)
			keys := []string{got[0].Key, got[1].Key}
			if statuses(got) != "[interrupted interrupted]" || !slices.Equal(keys, []string{id + ".interrupted", id + ".interrupted.2"}) {
				t.Fatalf("deliveries %+v; want both give-ups, keys %s.interrupted and %s.interrupted.2", got, id, id)
			}
			natstest.Eventually(t, 10*time.Second, func() bool { return !indexed(t, e, id) },
				"%s stays in the active-run index once settled again", id)
		})
	}
}

// indexed reports whether run id is in the active-run index.
func indexed(t *testing.T, e *env, id string) bool {
	t.Helper()
	active, err := e.store.Index().Active(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(active, func(ir runstore.IndexedRun) bool { return ir.ID == id })
}

// A retried run's budgets start again at the retry, also before a worker
// takes it: a sweep that finds the resumed run still waiting does not give
// it up at once for the time its first life took. (No worker serves its
// agent type, so the resumed run waits "starting" for as long as the test
// looks; the sweeps are the test's own.)
func TestAResumedRunWaitingForAWorkerHasItsBudgetAgain(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true})
	client, err := parent.New(jetruntest.OpenRuntime(t, e.nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const id = "resume-waiting"
	req := parent.Request{AgentType: "nobody", RunID: id, Input: map[string]any{},
		Detached: &events.Detached{OnFinish: "record", MaxBudgetMs: 3000}}
	if _, err := client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	sweepUntil := func(what string, done func(st reconcile.Stats, row *model.Row) bool) *model.Row {
		t.Helper()
		var row *model.Row
		natstest.Eventually(t, 30*time.Second, func() bool {
			st, err := e.recon.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if row, _, err = e.store.Get(ctx, id); err != nil {
				t.Fatal(err)
			}
			return done(st, row)
		}, "%s: last row %+v", what, row)
		return row
	}
	first := sweepUntil("first give-up", func(_ reconcile.Stats, r *model.Row) bool { return r.Status == events.StatusInterrupted })
	if first.Reason != events.ReasonBudgetExceeded || first.Attempt != 0 {
		t.Fatalf("first give-up: %+v", first)
	}
	waitDeliveries(t, e.rec, id, 1)

	if _, err := client.Dispatch(ctx, req); err != nil { // the retry
		t.Fatal(err)
	}
	// The first sweep whose index holds the resumed run again.
	row := sweepUntil("a sweep sees the resumed run", func(st reconcile.Stats, _ *model.Row) bool { return st.Active > 0 })
	if row.Status != events.StatusStarting || row.Handoffs != 0 || row.ReadyAt.IsZero() { // no attempt ran: none handed off
		t.Fatalf("resumed run after a sweep, well within a budget counted from its retry: status %s (%s: %s), handoffs %d, readyAt %v",
			row.Status, row.Reason, row.Error, row.Handoffs, row.ReadyAt)
	}
	// Its budget still holds, from the retry.
	second := sweepUntil("second give-up", func(_ reconcile.Stats, r *model.Row) bool { return r.Status == events.StatusInterrupted })
	if second.Reason != events.ReasonBudgetExceeded || !second.FinishedAt.After(row.ReadyAt.Add(3*time.Second)) {
		t.Fatalf("second give-up %s at %v, resumed at %v: want budget-exceeded past a budget from the retry",
			second.Reason, second.FinishedAt, row.ReadyAt)
	}
	got := waitDeliveries(t, e.rec, id, 2)
	if got[1].Key != id+".interrupted.2" {
		t.Fatalf("deliveries %+v: want the second give-up under %s.interrupted.2", got, id)
	}
	// Both give-ups are on the run's timeline, though no attempt ran in
	// between.
	if st := jetruntest.Statuses(jetruntest.ReadEvents(t, e.js, id)); !slices.Equal(st, []events.Status{events.StatusInterrupted, events.StatusInterrupted}) {
		t.Fatalf("status events %v, want both give-ups", st)
	}
}

// A retry whose writer died between resuming the run and publishing its
// dispatch: the reconciler publishes that dispatch under the id the
// writer would have used, not the run's first dispatch's (which a worker
// took long ago, and which the dedup window would hand back as if it had
// landed). The run completes on its next attempt, no dispatch counted
// lost.
func TestAResumeWhoseWriterDiedBeforeItsDispatchRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, options{reconcile: reconcile.Config{StartingGrace: 300 * time.Millisecond}, handlers: map[string]worker.Handler{
		"second-time": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if run.Attempt() == 1 {
				<-ctx.Done() // until its budget gives it up
				return worker.Result{}, context.Cause(ctx)
			}
			return worker.Result{Summary: "done"}, nil
		}),
	}})
	ctx := t.Context()
	const id = "resume-unpublished"
	e.detached(t, id, "second-time", map[string]any{}, events.Detached{MaxBudgetMs: 2000}) // the retry is taken well within it
	row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusInterrupted && r.Settled()
	})
	// The retry's writer resumes the row and dies before publishing.
	if _, resumed, err := engine.From(jetruntest.OpenRuntime(t, e.nc, jetrun.Config{})).Resume(ctx, row, false); err != nil || !resumed {
		t.Fatalf("resume: %v, resumed %v", err, resumed)
	}
	row = jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || row.Redispatches != 0 {
		t.Fatalf("after the reconciler published the retry's dispatch: status %s (%s: %s), attempt %d, redispatches %d",
			row.Status, row.Reason, row.Error, row.Attempt, row.Redispatches)
	}
}

// A keyed run given up and retried is queued again, and its timeline says
// so each time, though no attempt ran in between: the retry's queued event
// is not taken for a copy of the submit's.
func TestARetriedKeyedRunShowsEachQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	client, err := parent.New(jetruntest.OpenRuntime(t, e.nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	req := parent.Request{AgentType: "nobody", RunID: "keyed-retry", Input: map[string]any{}, ConcurrencyKey: "k-retry",
		Detached: &events.Detached{OnFinish: "record", MaxBudgetMs: 500}}
	givenUp := func(after time.Time) func(*model.Row) bool {
		return func(r *model.Row) bool {
			return r.Status == events.StatusInterrupted && r.FinishedAt.After(after) && r.Settled()
		}
	}
	if _, err := client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	first := jetruntest.WaitRow(t, e.store, req.RunID, 30*time.Second, givenUp(time.Time{}))
	if _, err := client.Dispatch(ctx, req); err != nil { // the retry
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, e.store, req.RunID, 30*time.Second, givenUp(first.FinishedAt))
	want := []events.Status{events.StatusQueued, events.StatusInterrupted, events.StatusQueued, events.StatusInterrupted}
	natstest.Eventually(t, 10*time.Second, func() bool {
		return slices.Equal(jetruntest.Statuses(jetruntest.ReadEvents(t, e.js, req.RunID)), want)
	}, "the status events never became %v", want)
}
