package parent_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// failureJSON runs req to its failure and returns the failure's JSON keys.
func failureJSON(t *testing.T, c *parent.Client, req parent.Request) map[string]any {
	t.Helper()
	_, err := c.Run(t.Context(), req)
	var f *parent.Failure
	ok := errors.As(err, &f)
	if !ok {
		t.Fatalf("run %s: want a failure, got %v", req.RunID, err)
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(data, &keys); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", req.RunID, data)
	return keys
}

// "reason" and "childStillRunning" are part of an interrupted failure only:
// error and aborted failures say what went wrong in "error".
func TestFailureJSONCarriesReasonOnlyWhenInterrupted(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	ctx := t.Context()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("fails", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, context.DeadlineExceeded
		})
		w.HandleFunc("waits", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		})
	})
	c, err := parent.New(rt, parent.Config{ReattachNoProgress: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	keys := failureJSON(t, c, parent.Request{AgentType: "fails", RunID: "f-error", Input: 1})
	if keys["status"] != "error" || keys["retryable"] != false {
		t.Fatalf("error failure: %v", keys)
	}
	for _, k := range []string{"reason", "childStillRunning"} {
		if _, ok := keys[k]; ok {
			t.Fatalf("error failure carries %q: %v", k, keys)
		}
	}

	// An aborted run: cancelled while the caller awaits it.
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "waits", RunID: "f-aborted", Input: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "f-aborted", "enough"); err != nil {
		t.Fatal(err)
	}
	keys = failureJSON(t, c, parent.Request{AgentType: "waits", RunID: "f-aborted", Input: 1})
	if keys["status"] != "aborted" {
		t.Fatalf("aborted failure: %v", keys)
	}
	for _, k := range []string{"reason", "childStillRunning"} {
		if _, ok := keys[k]; ok {
			t.Fatalf("aborted failure carries %q: %v", k, keys)
		}
	}

	// An interrupted one (the caller gave up on a silent run): both present,
	// childStillRunning even when true or false.
	keys = failureJSON(t, c, parent.Request{AgentType: "waits", RunID: "f-interrupted", Input: 1})
	if keys["status"] != "interrupted" || keys["reason"] != events.ReasonNoProgress ||
		keys["childStillRunning"] != true || keys["retryable"] != true {
		t.Fatalf("interrupted failure: %v", keys)
	}
	f := &parent.Failure{RunID: "x", Status: events.StatusInterrupted, Retryable: true, Reason: events.ReasonWindowExceeded}
	data, _ := json.Marshal(f)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	if v, ok := m["childStillRunning"]; !ok || v != false {
		t.Fatalf("interrupted failure without its child: %s", data)
	}
}
