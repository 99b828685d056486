package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A dispatch with a parent from another service can need approval: the
// ask (the child's agent type and input) is listed before the child is
// dispatched; POST /v1/runs answers once it is answered: approved, the
// child is dispatched (201); refused, nothing is, and the refusal is the
// call's result (200 {"rejected": true, ...}). parent.Client.Run gives a
// refusal as its Result, not an error.
func TestDispatchWithParentNeedsApproval(t *testing.T) {
	t.Parallel()
	b, env := setupAsks(t)
	ctx := context.Background()
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"asker","runId":"boss","input":"b"}`, nil), 201)
	listAsks(t, b, "runId=boss", 1)

	type reply struct {
		status int
		body   map[string]any
	}
	post := func(child string) chan reply {
		out := make(chan reply, 1)
		go func() {
			var body map[string]any
			resp := do(t, "POST", b.url+"/v1/runs", `{"agentType":"asker","runId":"`+child+`","input":{"task":"refund"},
				"parent":"boss","parentToolCallId":"call-`+child+`","approval":{"title":"refund?"}}`, &body)
			out <- reply{resp.StatusCode, body}
		}()
		return out
	}
	answer := func(child, value string) {
		t.Helper()
		id := asks.SignalID("boss", asks.ApprovalName(child), 0)
		a := listedAsk(t, b, id)
		var p struct {
			AgentType string            `json:"agentType"`
			Input     map[string]string `json:"input"`
			CallID    string            `json:"callId"`
		}
		if err := json.Unmarshal(a.Payload, &p); err != nil || a.Kind != events.AskApprove || a.Title != "refund?" ||
			p.AgentType != "asker" || p.Input["task"] != "refund" || p.CallID != "call-"+child || a.Status != events.AskOpen {
			t.Fatalf("the approval of %s: %+v (%s)", child, a, a.Payload)
		}
		if _, err := env.Client.Inspect(ctx, child); !errors.Is(err, parent.ErrRunNotFound) {
			t.Fatalf("child %s dispatched before the approval: %v", child, err)
		}
		wantStatus(t, do(t, "POST", b.url+"/v1/asks/"+id+":answer", `{"digest":"`+a.Digest+`","value":`+value+`}`, nil), 200)
	}

	yes := post("c-yes")
	answer("c-yes", `{"approved":true}`)
	if r := <-yes; r.status != 201 || r.body["id"] != "c-yes" {
		t.Fatalf("approved dispatch answered %d %v", r.status, r.body)
	}
	if row := jetruntest.WaitRow(t, env.Store, "c-yes", 30*time.Second, func(*model.Row) bool { return true }); row.Parent != "boss" {
		t.Fatalf("approved child: %+v", row)
	}

	no := post("c-no")
	answer("c-no", `{"approved":false,"comment":"too risky"}`)
	r := <-no
	out, _ := json.Marshal(r.body["output"])
	if r.status != 200 || r.body["rejected"] != true || r.body["summary"] != asks.RejectedSummary ||
		string(out) != `{"answer":{"approved":false,"comment":"too risky"},"rejected":true}` {
		t.Fatalf("refused dispatch answered %d %v", r.status, r.body)
	}
	if _, err := env.Client.Inspect(ctx, "c-no"); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("the refused child was dispatched: %v", err)
	}
	// Asked again (a caller that went away), the same refusal, at once.
	if r := <-post("c-no"); r.status != 200 || r.body["rejected"] != true {
		t.Fatalf("refused dispatch asked again answered %d %v", r.status, r.body)
	}

	// parent.Client.Run: a refusal is the result.
	type result struct {
		res *parent.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := env.Client.Run(ctx, parent.Request{AgentType: "asker", RunID: "c-go", Input: 1, Parent: "boss",
			Approval: &parent.Approval{}})
		done <- result{res, err}
	}()
	id := asks.SignalID("boss", asks.ApprovalName("c-go"), 0)
	a := listedAsk(t, b, id)
	wantStatus(t, do(t, "POST", b.url+"/v1/asks/"+id+":answer", `{"digest":"`+a.Digest+`","value":{"approved":false}}`, nil), 200)
	if got := <-done; got.err != nil || got.res.Summary != asks.RejectedSummary || string(got.res.Output) != `{"answer":{"approved":false},"rejected":true}` {
		t.Fatalf("Run of a refused delegation: %+v, %v", got.res, got.err)
	}
}

// listedAsk polls GET /v1/asks until it lists ask id, open.
func listedAsk(t *testing.T, b *bundle, id string) events.Ask {
	t.Helper()
	var found events.Ask
	natstest.Eventually(t, 30*time.Second, func() bool {
		var l askList
		wantStatus(t, do(t, "GET", b.url+"/v1/asks?limit=1000", "", &l), 200)
		for _, a := range l.Asks {
			if a.ID == id {
				found = a
				return true
			}
		}
		return false
	}, "ask %s was never listed open", id)
	return found
}
