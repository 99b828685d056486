package mcpserver_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A tools/call nested under a run can need approval: the ask (the tool's
// agent type and input) is asked on the parent run before the tool's run
// is dispatched; refused, nothing is dispatched and the call's result (not
// an error) says so; approved, the run goes on.
func TestDelegatedCallNeedsApproval(t *testing.T) {
	f := newFixture(t)
	ctx := testContext(t)
	cs := mustConnect(t, f.url, mcpserver.SessionlessRevision, nil)
	if _, err := f.env.Client.Dispatch(ctx, parent.Request{AgentType: "block", RunID: "boss", Input: 1}); err != nil {
		t.Fatal(err)
	}
	st := engine.From(f.env.Runtime).Asks()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	call := func(callID string) (chan answer, string, *events.Ask) {
		done := make(chan answer, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: map[string]any{"steps": 2},
				Meta: mcp.Meta{mcpserver.MetaParent: "boss", mcpserver.MetaParentToolCallID: callID,
					mcpserver.MetaApproval: map[string]any{"title": "take steps?"}}})
			done <- answer{res, err}
		}()
		child := parent.RunID("boss", callID)
		id := asks.SignalID("boss", asks.ApprovalName(child), 0)
		deadline := time.Now().Add(30 * time.Second)
		for {
			a, _, err := st.Get(ctx, id)
			if err == nil {
				var p struct {
					AgentType string         `json:"agentType"`
					Input     map[string]int `json:"input"`
				}
				if err := json.Unmarshal(a.Payload, &p); err != nil || a.Title != "take steps?" || p.AgentType != "steps" || p.Input["steps"] != 2 {
					t.Fatalf("the approval: %+v (%s)", a, a.Payload)
				}
				if _, err := f.env.Client.Inspect(ctx, child); !errors.Is(err, parent.ErrRunNotFound) {
					t.Fatalf("%s dispatched before the approval: %v", child, err)
				}
				return done, child, a
			}
			if time.Now().After(deadline) {
				t.Fatalf("no approval asked for %s: %v", child, err)
			}
			time.Sleep(20 * time.Millisecond) // polling with a deadline
		}
	}

	done, child, a := call("call-no")
	if _, err := st.Answer(ctx, a.ID, a.Digest, json.RawMessage(`{"approved":false,"comment":"no"}`), "ops"); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.res.IsError || got.res.Meta[mcpserver.MetaRunID] != child {
		t.Fatalf("refused call: %+v, %v; want a result, not an error", got.res, got.err)
	}
	if out, _ := json.Marshal(got.res.StructuredContent); string(out) != `{"answer":{"approved":false,"comment":"no"},"rejected":true}` {
		t.Fatalf("refused call's result %s", out)
	}
	if _, err := f.env.Client.Inspect(ctx, child); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("the refused run was dispatched: %v", err)
	}

	done, child, a = call("call-yes")
	if _, err := st.Answer(ctx, a.ID, a.Digest, json.RawMessage(`{"approved":true}`), "ops"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		_, err := f.env.Client.Signal(ctx, child, "go", nil)
		return err == nil
	}, "the approved run %s never started", child)
	got = <-done
	if got.err != nil || got.res.IsError || got.res.Meta[mcpserver.MetaRunID] != child {
		t.Fatalf("approved call: %+v, %v", got.res, got.err)
	}
	if out, _ := json.Marshal(got.res.StructuredContent); string(out) != `{"done":2}` {
		t.Fatalf("approved call's result %s", out)
	}
}
