package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
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

// taskWithApproval starts a task of "steps" nested under run boss that
// needs approval, in the extension's form, on session c.
func taskWithApproval(ctx context.Context, c *rawSession, callID string) taskOnWire {
	meta := maps.Clone(tasksCaps)
	meta[mcpserver.MetaParent], meta[mcpserver.MetaParentToolCallID] = "boss", callID
	meta[mcpserver.MetaApproval] = map[string]any{"title": "take steps?"}
	return c.task(ctx, "tools/call", map[string]any{"name": "steps", "arguments": map[string]any{"steps": 2}, "_meta": meta})
}

// A task-augmented tools/call can need approval too: the task is answered
// at once, input_required, its input request the approval ask (the same
// ask the inbox lists), and its run is not dispatched until the ask is
// approved: by the client's tasks/update, or by anyone answering the ask.
// Refused, the task completes with the refusal as its result, not an
// error, and nothing is dispatched; tasks/cancel closes the ask. The
// server that created the task may be gone when the answer comes: the next
// tasks/get, on any server, dispatches the run.
func TestTaskNeedsApproval(t *testing.T) {
	f := newFixture(t)
	ctx := testContext(t)
	if _, err := f.env.Client.Dispatch(ctx, parent.Request{AgentType: "block", RunID: "boss", Input: 1}); err != nil {
		t.Fatal(err)
	}
	st := engine.From(f.env.Runtime).Asks()
	c := openRawSession(t, ctx, f.url)
	c.waitListed(ctx, "steps")
	get := func(c *rawSession, id string) taskOnWire {
		return c.task(ctx, "tasks/get", map[string]any{"taskId": id, "_meta": tasksCaps})
	}
	pending := func(created taskOnWire) (*events.Ask, string) {
		t.Helper()
		if created.Status != mcpserver.TaskInputRequired {
			t.Fatalf("created task %+v; want input_required", created)
		}
		task := get(c, created.TaskID) // a CreateTaskResult has no inputRequests
		a, _, err := st.Get(ctx, asks.SignalID("boss", asks.ApprovalName(task.TaskID), 0))
		if err != nil {
			t.Fatalf("task %s: no approval ask: %v", task.TaskID, err)
		}
		key := "approval:" + a.ID
		if task.Status != mcpserver.TaskInputRequired || len(task.InputRequests) != 1 || task.InputRequests[key] == nil {
			t.Fatalf("task %+v; want input_required with the one input request %s", task, key)
		}
		var p struct {
			AgentType string         `json:"agentType"`
			Input     map[string]int `json:"input"`
		}
		if err := json.Unmarshal(a.Payload, &p); err != nil || a.Title != "take steps?" || p.AgentType != "steps" || p.Input["steps"] != 2 {
			t.Fatalf("the approval: %+v (%s)", a, a.Payload)
		}
		if _, err := f.env.Client.Inspect(ctx, task.TaskID); !errors.Is(err, parent.ErrRunNotFound) {
			t.Fatalf("%s dispatched before the approval: %v", task.TaskID, err)
		}
		return a, key
	}
	finish := func(c *rawSession, id string) json.RawMessage {
		t.Helper()
		natstest.Eventually(t, 30*time.Second, func() bool {
			_, err := f.env.Client.Signal(ctx, id, "go", nil)
			return err == nil
		}, "the approved run %s never started", id)
		var res json.RawMessage
		natstest.Eventually(t, 30*time.Second, func() bool {
			raw := c.call(ctx, "tasks/get", map[string]any{"taskId": id, "_meta": tasksCaps})
			var got struct {
				Status string
				Result json.RawMessage
			}
			if json.Unmarshal(raw, &got) != nil || got.Status != mcpserver.TaskCompleted {
				return false
			}
			res = got.Result
			return true
		}, "task %s never completed", id)
		return res
	}

	// Approved by the client's inputResponses.
	yes := taskWithApproval(ctx, c, "call-yes")
	if yes.TaskID != parent.RunID("boss", "call-yes") {
		t.Fatalf("task id %s; want the run id of the parent's tool call, as a plain call's", yes.TaskID)
	}
	_, key := pending(yes)
	c.call(ctx, "tasks/update", map[string]any{"taskId": yes.TaskID, "_meta": tasksCaps,
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"approved": true}}}})
	if res := finish(c, yes.TaskID); !strings.Contains(string(res), `"structuredContent":{"done":2}`) {
		t.Fatalf("the approved task's result %s", res)
	}

	// Refused from the inbox (the same ask).
	no := taskWithApproval(ctx, c, "call-no")
	a, _ := pending(no)
	if _, err := st.Answer(ctx, a.ID, a.Digest, json.RawMessage(`{"approved":false,"comment":"no"}`), "ops"); err != nil {
		t.Fatal(err)
	}
	got := get(c, no.TaskID)
	raw := c.call(ctx, "tasks/get", map[string]any{"taskId": no.TaskID, "_meta": tasksCaps})
	if got.Status != mcpserver.TaskCompleted || !strings.Contains(string(raw), `"structuredContent":{"answer":{"approved":false,"comment":"no"},"rejected":true}`) ||
		strings.Contains(string(raw), `"isError":true`) {
		t.Fatalf("the refused task: %s; want completed, the refusal its result, not an error", raw)
	}
	if _, err := f.env.Client.Inspect(ctx, no.TaskID); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("the refused run was dispatched: %v", err)
	}

	// Cancelled while it waits: the ask is closed, nothing dispatched.
	gone := taskWithApproval(ctx, c, "call-cancel")
	a, _ = pending(gone)
	c.call(ctx, "tasks/cancel", map[string]any{"taskId": gone.TaskID, "_meta": tasksCaps})
	if got := get(c, gone.TaskID); got.Status != mcpserver.TaskCancelled {
		t.Fatalf("the cancelled task: %+v", got)
	}
	if closed, _, err := st.Get(ctx, a.ID); err != nil || closed.Status != events.AskClosed {
		t.Fatalf("the cancelled task's ask: %+v, %v; want closed", closed, err)
	}

	// The creating server stops before the answer: another one dispatches.
	s := mcpserver.New(mcpserver.Config{Client: f.env.Client, Runs: kv.New(f.env.Runtime), Runtime: f.env.Runtime, SyncEvery: 50 * time.Millisecond})
	sctx, stop := context.WithCancel(ctx)
	s.Start(sctx)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Client: f.env.Client, MCP: s.Handler(),
		Tokens: map[string]httpapi.Role{writeToken: httpapi.RoleWrite}}))
	first := openRawSession(t, ctx, srv.URL+httpapi.MCPPath)
	first.waitListed(ctx, "steps")
	late := taskWithApproval(ctx, first, "call-late")
	a, _ = pending(late)
	stop()
	s.Stop()
	srv.Close()
	if _, err := st.Answer(ctx, a.ID, a.Digest, json.RawMessage(`{"approved":true}`), "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Client.Inspect(ctx, late.TaskID); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("%s dispatched by a stopped server: %v", late.TaskID, err)
	}
	if res := finish(c, late.TaskID); !strings.Contains(string(res), `"structuredContent":{"done":2}`) {
		t.Fatalf("the late-approved task's result %s", res)
	}
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("steps ran %d times; want 2 (the two approved tasks, once each)", n)
	}
}
