package reconcile_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A parent given up for its budget is not cancelled: the child it awaited
// goes on and finishes, and the parent's retry re-attaches to it and gets
// its result, without running it again (issue 35, item 7).
func TestAGivenUpParentsChildFinishesForItsRetry(t *testing.T) {
	t.Parallel()
	gate, childStarted := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := setup(t, options{noReconcile: true, handlers: map[string]worker.Handler{
		"boss": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			res, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "helper", Input: map[string]any{}, CallID: "look"})
			if err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: "helper said: " + res.Summary}, nil
		}),
		"helper": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			once.Do(func() { close(childStarted) })
			select {
			case <-gate:
				return worker.Result{Summary: "found it"}, nil
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		}),
	}})
	ctx := t.Context()
	const boss = "boss"
	child := parent.RunID(boss, "look")
	req := parent.Request{AgentType: "boss", RunID: boss, Input: map[string]any{},
		Detached: &events.Detached{OnFinish: "record", MaxBudgetMs: 1500}}
	if _, err := e.client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, childStarted, "the child to start")

	// Swept past its budget: given up, its handler torn down.
	natstest.Eventually(t, 30*time.Second, func() bool {
		return sweptRow(t, e, boss).Status == events.StatusInterrupted
	}, "the parent was never given up")
	given := jetruntest.WaitRow(t, e.store, boss, 30*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusInterrupted && !r.ChildStillRunning
	})
	if given.Reason != events.ReasonBudgetExceeded {
		t.Fatalf("parent: %s (%s)", given.Status, given.Reason)
	}
	// Later sweeps see the child under its given-up parent.
	sweeps(t, e, 2)
	row, _, err := e.store.Get(ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != events.StatusRunning || row.CancelRequested {
		t.Fatalf("the child of a given-up parent: %s (%s: %s), cancelRequested %v; want it left running",
			row.Status, row.Reason, row.Error, row.CancelRequested)
	}
	close(gate)
	if row := jetruntest.WaitRow(t, e.store, child, 30*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
		t.Fatalf("child: %s (%s: %s)", row.Status, row.Reason, row.Error)
	}

	// The retry re-attaches to the child and gets its result.
	if _, err := e.client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	done := jetruntest.WaitRow(t, e.store, boss, 30*time.Second, jetruntest.Final)
	if done.Status != events.StatusCompleted || done.Summary != "helper said: found it" || done.Attempt != 2 {
		t.Fatalf("retried parent: %s (%s: %s) %q at attempt %d", done.Status, done.Reason, done.Error, done.Summary, done.Attempt)
	}
	if row, _, _ := e.store.Get(ctx, child); row.Attempt != 1 {
		t.Fatalf("the child ran %d times", row.Attempt)
	}
}

// A cancel is different: a parent given up and then cancelled (its
// canceller died before reaching the children) has its live children
// cancelled by the reconciler, while those of a parent only given up are
// left alone.
func TestTheReconcilerCascadesACancelNotAGiveUp(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true})
	ctx := context.Background()
	now := time.Now()
	givenUp := func(id string, cancelled bool) *model.Row {
		r := &model.Row{ID: id, AgentType: "demo", Status: events.StatusRunning, Attempt: 1, CreatedAt: now}
		if err := model.Apply(r, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over"}, now); err != nil {
			t.Fatal(err)
		}
		if cancelled {
			if err := model.Apply(r, model.CancelRequested{Reason: "stop"}, now); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	childOf := func(id, p string) *model.Row {
		return &model.Row{ID: id, AgentType: "demo", Parent: p, Depth: 1, Status: events.StatusRunning, Attempt: 1,
			Worker: "ghost", LeaseUntil: now.Add(time.Hour), CreatedAt: now}
	}
	for _, r := range []*model.Row{
		givenUp("only-given-up", false), childOf("left", "only-given-up"),
		givenUp("given-up-then-cancelled", true), childOf("cancelled", "given-up-then-cancelled"),
	} {
		if _, err := e.store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.recon.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"left": false, "cancelled": true} {
		row, _, err := e.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if row.CancelRequested != want {
			t.Errorf("%s: cancelRequested %v, want %v", id, row.CancelRequested, want)
		}
	}
}
