package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A plain publish's first delivery whose run has no trace in the runs
// bucket (no row, no marker of a removal) cannot have been cleared after
// it was published (runstore.Store.MissProvesUncleared): it reads no
// tombstone. A run whose row was removed (the marker an erase leaves) has
// its tombstone read, and its new dispatch still runs.
func TestAPlainPublishReadsNoTombstoneUnlessItsRowWasRemoved(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ran := map[string]int{}
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"tomb": worker.HandlerFunc(func(_ context.Context, run *worker.Run) (worker.Result, error) {
			mu.Lock()
			ran[run.ID()]++
			mu.Unlock()
			return worker.Result{}, nil
		}),
	})
	ctx := context.Background()
	// Every read of a tombstone is a direct get on the active bucket.
	reads := map[string]int{}
	sub, err := b.nc.Subscribe("$JS.API.DIRECT.GET.KV_jetrun_active.$KV.jetrun_active.cleared.*", func(m *nats.Msg) {
		mu.Lock()
		reads[m.Subject[len("$JS.API.DIRECT.GET.KV_jetrun_active.$KV.jetrun_active.cleared."):]]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// t2 existed and was erased, as Runtime.Erase does it (the tombstone,
	// then the row removed), before its new dispatch was published.
	old := model.NewRun("tomb", events.Dispatch{RunID: "t2"}, 1, time.Now())
	if _, err := b.store.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Index().Tombstone(ctx, "t2", 1); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Erase(ctx, old); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2"} {
		publish(t, b.js, "jetrun.dispatch.tomb", `{"runId":"`+id+`","input":{}}`)
		jetruntest.WaitRow(t, b.store, id, 20*time.Second, jetruntest.Final)
	}
	drained(t, b.js, "tomb")
	mu.Lock()
	defer mu.Unlock()
	if ran["t1"] != 1 || ran["t2"] != 1 {
		t.Errorf("handler ran %v, want t1 and t2 once each", ran)
	}
	if reads["t1"] != 0 {
		t.Errorf("t1's tombstone was read %d times: a run with no trace needs no read", reads["t1"])
	}
	if reads["t2"] == 0 {
		t.Errorf("t2's tombstone was not read though its row was removed")
	}
}
