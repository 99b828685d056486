package demo_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A demo run with children delegates to that many nested demo runs, all
// started by its tool call "delegate", and completes once they have.
func TestChildrenAreNestedRunsOfOneToolCall(t *testing.T) {
	t.Parallel()
	e := jetruntest.NewEnv(t)
	e.StartWorker(t, worker.Config{Concurrency: 4, Lease: worker.MinLease}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := e.Client.Run(ctx, parent.Request{AgentType: demo.AgentType, RunID: "tree",
		Input: map[string]int{"steps": 1, "stepMs": 0, "children": 3}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary != "finished 1 step and 3 nested runs" {
		t.Fatalf("summary %q", res.Summary)
	}
	kids, err := e.Store.List(ctx, func(r *model.Row) bool { return r.Parent == "tree" })
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 3 {
		t.Fatalf("%d nested runs, want 3", len(kids))
	}
	for _, k := range kids {
		if k.ParentToolCallID != demo.ChildCallID || k.Status != events.StatusCompleted || k.Depth != 1 || k.Summary != "finished 2 steps" {
			t.Errorf("nested run %s: tool call %q, %s, depth %d, %q", k.ID, k.ParentToolCallID, k.Status, k.Depth, k.Summary)
		}
	}
}
