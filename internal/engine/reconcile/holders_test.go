package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

// A run whose row names a live worker that does not execute it — forged
// here: the worker never claimed it; in life an attempt that ended without
// a word on its row whose release was lost too (issue 23, item 8) — is
// released by the reconciler once the worker says it does not execute it,
// and completes; the worker's other run, which it does execute, is left
// alone.
func TestARunItsLiveHolderDoesNotExecuteIsReleasedAndCompletes(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true, workerID: "w-forgets", reconcile: reconcile.Config{
		LeaseGrace: time.Millisecond, HolderCheckEvery: time.Millisecond,
	}})
	ctx := context.Background()
	epoch, err := e.store.Workers().Epoch(ctx, "w-forgets")
	if err != nil || epoch == "" {
		t.Fatalf("the worker's epoch: %q, %v", epoch, err)
	}
	e.detached(t, "executed", "demo", map[string]int{"steps": 200, "stepMs": 100}, events.Detached{})
	jetruntest.WaitRow(t, e.store, "executed", 10*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusRunning && r.Worker == "w-forgets"
	})
	now := time.Now()
	if _, err := e.store.Create(ctx, &model.Row{
		ID: "forgotten", AgentType: "demo", Status: events.StatusRunning, Attempt: 1,
		Worker: "w-forgets", WorkerEpoch: epoch, CreatedAt: now, StartedAt: now,
		DispatchSeq: 999, // its dispatch is gone
		Input:       []byte(`{"steps":2,"stepMs":0}`),
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.recon.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st := e.recon.TestSignals.Swept.WaitFor(func(st reconcile.Stats) bool { return st.Released > 0 })
	released := st.Released
	e.recon.TestSignals.Acted.WaitFor(func(a reconcile.Acted) bool {
		_, redispatched := a.Action.(model.Redispatch)
		return a.RunID == "forgotten" && redispatched
	})
	r := jetruntest.WaitRow(t, e.store, "forgotten", 30*time.Second, jetruntest.Final) // its worker ends it
	if r.Status != events.StatusCompleted || r.Attempt != 2 || r.Handoffs != 1 || released != 1 {
		t.Fatalf("forgotten: %s (%s), attempt %d, handoffs %d, released %d; want completed at attempt 2 after one release",
			r.Status, r.Error, r.Attempt, r.Handoffs, released)
	}
	if r, _, _ := e.store.Get(ctx, "executed"); r.Attempt != 1 || r.Handoffs != 0 || r.Worker != "w-forgets" {
		t.Fatalf("executed: attempt %d, handoffs %d, worker %q; want it left to its worker", r.Attempt, r.Handoffs, r.Worker)
	}
}
