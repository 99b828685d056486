package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A budget set to 0 on the wire (or to events.BudgetNever in Go) is off: a
// run that went silent long past every default is left running, while a
// run with an explicit small budget, or with the defaults, is given up.
func TestZeroOrNeverDisablesABudget(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	e := setup(t, options{
		noReconcile: true,
		reconcile:   reconcile.Config{MaxBudget: 500 * time.Millisecond, NoProgressBudget: 300 * time.Millisecond},
		handlers: map[string]worker.Handler{
			// One sign of progress, then silence until the gate opens.
			"quiet": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
				if err := run.Progress(ctx, worker.Progress{Fraction: 0.1, Message: "started"}); err != nil {
					return worker.Result{}, err
				}
				select {
				case <-gate:
					return worker.Result{Summary: "spoke at last"}, nil
				case <-ctx.Done():
					return worker.Result{}, context.Cause(ctx)
				}
			}),
		},
	})
	ctx := context.Background()

	// From another language: a plain publish with both budgets at 0.
	msg := nats.NewMsg("jetrun.dispatch.quiet")
	msg.Header.Set(nats.MsgIdHdr, "zero")
	msg.Data = []byte(`{"runId":"zero","input":1,"detached":{"onFinish":"record","maxBudgetMs":0,"noProgressBudgetMs":0}}`)
	if _, err := e.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	never := events.BudgetNever
	e.detached(t, "never", "quiet", 1, events.Detached{MaxBudgetMs: never, NoProgressBudgetMs: never})
	e.detached(t, "small-silence", "quiet", 1, events.Detached{MaxBudgetMs: never, NoProgressBudgetMs: 300})
	e.detached(t, "small-life", "quiet", 1, events.Detached{MaxBudgetMs: 1000, NoProgressBudgetMs: never})
	e.detached(t, "defaults", "quiet", 1, events.Detached{})
	ids := []string{"zero", "never", "small-silence", "small-life", "defaults"}

	// Every run started and made its one sign of progress; then it has been
	// silent for an hour when it is swept.
	aged := time.Now().Add(-time.Hour)
	for _, id := range ids {
		jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool {
			return r.Status == events.StatusRunning && !r.LastSignalAt.IsZero()
		})
		if _, _, err := e.store.Mutate(ctx, id, func(r *model.Row) error {
			r.CreatedAt, r.StartedAt, r.LastSignalAt = aged, aged, aged
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	sweeps(t, e, 3)

	zero, _, err := e.store.Get(ctx, "zero")
	if err != nil {
		t.Fatal(err)
	}
	if zero.Detached.MaxBudgetMs != events.BudgetNever || zero.Detached.NoProgressBudgetMs != events.BudgetNever {
		t.Fatalf("budgets of 0 stored as %+v, want BudgetNever", zero.Detached)
	}
	for id, want := range map[string]string{
		"zero": "", "never": "",
		"small-silence": events.ReasonNoProgress, "small-life": events.ReasonBudgetExceeded, "defaults": events.ReasonBudgetExceeded,
	} {
		row, _, err := e.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case want == "" && row.Status != events.StatusRunning:
			t.Errorf("%s has its budgets off but was given up: %s %s", id, row.Status, row.Reason)
		case want != "" && (row.Status != events.StatusInterrupted || row.Reason != want):
			t.Errorf("%s: %s %q, want interrupted %q", id, row.Status, row.Reason, want)
		}
	}

	close(gate)
	for _, id := range []string{"zero", "never"} {
		if row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Settled); row.Status != events.StatusCompleted {
			t.Fatalf("%s: %+v", id, row)
		}
	}
	for _, id := range []string{"small-silence", "small-life", "defaults"} {
		jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Settled)
	}
}

// A no-progress budget shorter than the sweep interval is enforced when it
// runs out, not at the next sweep (issue 23): the sweep that finds the run
// within its budget has it looked at again then: the give-up comes from
// that check between sweeps, not from the next sweep.
func TestShortBudgetIsEnforcedBetweenSweeps(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Second
	e := setup(t, options{
		handlers:    map[string]worker.Handler{"signal": signaller(50 * time.Millisecond)},
		reconcile:   reconcile.Config{Interval: interval},
		noReconcile: true,
	})
	e.detached(t, "quiet", "signal", -1, events.Detached{NoProgressBudgetMs: 1500}) // one signal, then silence
	// The budget is armed; the reconciler's first sweep comes now.
	jetruntest.WaitRow(t, e.store, "quiet", 30*time.Second, func(r *model.Row) bool { return !r.LastSignalAt.IsZero() })
	if err := e.recon.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	acted := e.recon.TestSignals.Acted.WaitFor(func(a reconcile.Acted) bool {
		_, gaveUp := a.Action.(model.GiveUpByBudget)
		return a.RunID == "quiet" && gaveUp
	})
	if !acted.Between {
		t.Fatalf("quiet was given up by a sweep (%+v), not by the budget check between sweeps", acted)
	}
	row, _, err := e.store.Get(t.Context(), "quiet")
	if err != nil || row.Status != events.StatusInterrupted || row.Reason != events.ReasonNoProgress {
		t.Fatalf("quiet: %+v, %v", row, err)
	}
}

// A detached keyed run's absolute budget does not run while it waits in
// its key's queue, nor all at once when it leaves it: it counts from its
// promotion (readyAt), so a run queued longer than its budget still gets
// its budget to start in. (No worker serves its agent type, so after its
// promotion it waits "starting" for as long as the test looks.)
func TestAKeyedRunsBudgetCountsFromItsPromotion(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	e := setup(t, options{noReconcile: true, handlers: map[string]worker.Handler{
		"holder": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			select {
			case <-gate:
				return worker.Result{Summary: "done"}, nil
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		}),
	}})
	client, err := parent.New(jetruntest.OpenRuntime(t, e.nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const key, budget = "k-budget", 1500 * time.Millisecond
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "holder", RunID: "key-holder", Input: map[string]any{}, ConcurrencyKey: key}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, e.store, "key-holder", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	queued, err := client.Dispatch(ctx, parent.Request{AgentType: "nobody", RunID: "key-queued", Input: map[string]any{},
		ConcurrencyKey: key, Detached: &events.Detached{OnFinish: "record", MaxBudgetMs: budget.Milliseconds()}})
	if err != nil {
		t.Fatal(err)
	}
	// Swept while queued for longer than its budget: it stays queued.
	natstest.Eventually(t, 30*time.Second, func() bool {
		st, err := e.recon.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		row, _, err := e.store.Get(ctx, "key-queued")
		if err != nil || row.Status != events.StatusQueued {
			t.Fatalf("the queued run while its key is held: %+v, %v", row, err)
		}
		return st.Active > 0 && time.Since(queued.Run.CreatedAt) > 2*budget
	}, "the sweeps did not see the queued run")

	close(gate) // the holder ends; the key promotes the queued run
	jetruntest.WaitRow(t, e.store, "key-queued", 10*time.Second, func(r *model.Row) bool { return r.Status != events.StatusQueued })
	if _, err := e.recon.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if row, _, err := e.store.Get(ctx, "key-queued"); err != nil || row.Status != events.StatusStarting || row.ReadyAt.IsZero() {
		t.Fatalf("promoted run after a sweep, within a budget from its promotion: %+v, %v", row, err)
	}
}
