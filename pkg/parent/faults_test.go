package parent_test

import (
	"context"
	"testing"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// An operator deletes the events stream and the runs bucket under a parent
// client and a worker: the next Dispatch re-creates them (as the worker
// does) and its run completes on its first attempt — no dispatch-failed,
// no max-attempts.
func TestDispatchAfterTheStreamAndBucketWereDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	run := func(id string) {
		t.Helper()
		res, err := b.client.Run(ctx, parent.Request{AgentType: demo.AgentType, RunID: id,
			Input: map[string]int{"steps": 2, "stepMs": 10}})
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		row, _, err := b.store.Get(ctx, id)
		if err != nil || row.Status != events.StatusCompleted || row.Attempt-row.Handoffs != 1 {
			t.Fatalf("run %s: %+v, row %+v, %v", id, res, row, err)
		}
	}
	run("before")
	if err := b.js.DeleteStream(context.Background(), "JETRUN_EVENTS"); err != nil {
		t.Fatal(err)
	}
	if err := b.js.DeleteKeyValue(context.Background(), "jetrun_runs"); err != nil {
		t.Fatal(err)
	}
	run("after")
}
