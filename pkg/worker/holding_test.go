package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A run whose row names a live worker that does not execute it (forged:
// worker A never claimed it, and does not even serve its agent type, so no
// redelivery can reach it) is released by the worker its dispatch reaches
// once A says it does not execute it, and completes there (issue 23, item 8).
// Before, B handed the dispatch back for as long as A lived.
func TestARedeliveredRunItsLiveHolderDoesNotExecuteIsTakenUp(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{ID: "wa", Lease: 2 * time.Second}, nil)
	startWorker(t, b.nc, worker.Config{ID: "wb", Lease: 2 * time.Second}, map[string]worker.Handler{
		"heldidle": worker.HandlerFunc(func(context.Context, *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "done"}, nil
		}),
	})
	ctx := context.Background()
	epoch, err := b.store.Workers().Epoch(ctx, "wa")
	if err != nil || epoch == "" {
		t.Fatalf("worker A's epoch: %q, %v", epoch, err)
	}
	now := time.Now()
	if _, err := b.store.Create(ctx, &model.Row{
		ID: "held-idle", AgentType: "heldidle", Status: events.StatusRunning, Attempt: 1,
		Worker: "wa", WorkerEpoch: epoch, CreatedAt: now, StartedAt: now, Input: []byte(`{}`),
	}); err != nil {
		t.Fatal(err)
	}
	publish(t, b.js, "jetrun.dispatch.heldidle", `{"runId":"held-idle","input":{}}`)
	r := jetruntest.WaitRow(t, b.store, "held-idle", 30*time.Second, jetruntest.Final)
	if r.Status != events.StatusCompleted || r.Attempt != 2 || r.Handoffs != 1 {
		t.Fatalf("run %s (%s), attempt %d, handoffs %d; want completed by wb at attempt 2 after one hand-off",
			r.Status, r.Error, r.Attempt, r.Handoffs)
	}
}
