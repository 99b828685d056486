package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A delegation that needs approval asks before the child is dispatched,
// showing the child's agent type and input: approved, the child runs;
// rejected, no child is dispatched and the caller gets the rejection as
// its result, not an error.
func TestDelegationNeedsApproval(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"helper": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "helped"}, nil
		}),
		"boss": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			res, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "helper", Input: map[string]string{"task": "refund"},
				CallID: "call-1", Approval: &worker.Ask{}})
			if err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: res.Summary, Output: res.Output}, nil
		}),
	})
	c, st := newClient(t, b), askStore(t, b)
	ctx := context.Background()
	child := func(boss string) string { return parent.RunID(boss, "call-1") }
	for _, id := range []string{"yes", "no"} {
		if _, err := c.Dispatch(ctx, parent.Request{AgentType: "boss", RunID: id, Input: 1}); err != nil {
			t.Fatal(err)
		}
	}
	answer := map[string]string{"yes": `{"approved":true}`, "no": `{"approved":false,"comment":"too risky"}`}
	for id, value := range answer {
		askID := asks.SignalID(id, "approve-"+child(id), 0)
		a := waitAsk(t, st, askID, func(a *events.Ask) bool { return a.Status == events.AskOpen })
		var p struct {
			AgentType string            `json:"agentType"`
			Input     map[string]string `json:"input"`
		}
		if err := json.Unmarshal(a.Payload, &p); err != nil || a.Kind != events.AskApprove || p.AgentType != "helper" || p.Input["task"] != "refund" {
			t.Fatalf("the delegation's ask: %+v (%s)", a, a.Payload)
		}
		if _, err := c.Inspect(ctx, child(id)); !errors.Is(err, parent.ErrRunNotFound) {
			t.Fatalf("child of %s dispatched before the approval: %v", id, err)
		}
		a, err := st.Answer(ctx, askID, a.Digest, json.RawMessage(value), "ops")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Deliver(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	yes := jetruntest.WaitRow(t, b.store, "yes", 30*time.Second, jetruntest.Final)
	if yes.Status != events.StatusCompleted || yes.Summary != "helped" {
		t.Fatalf("approved: %s %q %s", yes.Status, yes.Summary, yes.Error)
	}
	no := jetruntest.WaitRow(t, b.store, "no", 30*time.Second, jetruntest.Final)
	if no.Status != events.StatusCompleted || no.Summary != "the delegation was rejected" ||
		string(no.Output) != `{"answer":{"approved":false,"comment":"too risky"},"rejected":true}` {
		t.Fatalf("rejected: %s %q %s %s", no.Status, no.Summary, no.Output, no.Error)
	}
	if _, err := c.Inspect(ctx, child("no")); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("the rejected child was dispatched: %v", err)
	}
}
