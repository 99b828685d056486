package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// An operator deletes the events stream and the runs bucket under a running
// worker: the worker re-creates them, and a new run completes — neither
// ending "error" nor counted as a lost worker.
func TestDeletedStreamAndBucketAreRecreated(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, nil)
	ctx := context.Background()
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"before","input":{"steps":2,"stepMs":10}}`)
	jetruntest.WaitRow(t, b.store, "before", 10*time.Second, jetruntest.Final)

	if err := b.js.DeleteStream(ctx, "JETRUN_EVENTS"); err != nil {
		t.Fatal(err)
	}
	if err := b.js.DeleteKeyValue(ctx, "jetrun_runs"); err != nil {
		t.Fatal(err)
	}
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"after","input":{"steps":2,"stepMs":10}}`)
	row := jetruntest.WaitRow(t, b.store, "after", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt-row.Handoffs != 1 {
		t.Fatalf("run after the delete: %+v", row)
	}
	evs := jetruntest.ReadEvents(t, b.js, "after")
	if got := jetruntest.Statuses(evs); len(got) == 0 || got[len(got)-1] != events.StatusCompleted {
		t.Fatalf("statuses after the delete: %v", got)
	}
}
