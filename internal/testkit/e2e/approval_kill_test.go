package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A delegation that needs approval survives a kill -9 of the parent-worker
// that asked: the approval ask stays open; answered while no parent-worker
// runs (a dispatch posted with "approval"), or after a new one started (an
// MCP task), the child is dispatched once, when the caller comes back (the
// same runId posted again) or the task is read again, and runs once.
func TestDispatchApprovalSurvivesKill9(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st, err := asks.Open(ctx, e.js, wire.Namespace(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pwEnv := map[string]string{"JETRUN_NATS_URL": e.url, "JETRUN_HTTP_ADDR": addr, "JETRUN_HTTP_TOKENS": "write=" + mcpWriteToken}
	pw := start(t, "parent-worker", pwEnv)
	pw.waitLog("parent-worker ready", 60*time.Second)
	e.childWorker(t, "w1", nil)
	api := &apiClient{t: t, base: "http://" + addr, http: &http.Client{Timeout: 30 * time.Second}, token: mcpWriteToken}
	api.dispatch("boss", nil, map[string]int{"steps": 1, "approveAt": 1}) // the parent: waits for its own approval
	child := map[string]int{"steps": 2, "stepMs": 10}
	approval := func(childID string) *events.Ask {
		return jetruntest.WaitAsk(t, st, asks.SignalID("boss", asks.ApprovalName(childID), 0), 60*time.Second,
			func(a *events.Ask) bool { return a.Status == events.AskOpen })
	}
	notDispatched := func(childID string) {
		t.Helper()
		if _, _, err := e.store.Get(ctx, childID); !errors.Is(err, runstore.ErrRunNotFound) {
			t.Fatalf("%s dispatched before anyone came back for it: %v", childID, err)
		}
	}

	// 1. POST /v1/runs with "approval": the parent-worker dies while the
	// caller waits, the answer comes while none runs, the caller posts again.
	body, _ := json.Marshal(map[string]any{"agentType": "demo", "runId": "kid-http", "parent": "boss", "approval": map[string]any{}, "input": child})
	posted := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", api.base+"/v1/runs", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+mcpWriteToken)
		resp, err := api.http.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %s while the approval was open", resp.Status)
		}
		posted <- err
	}()
	a := approval("kid-http")
	pw.kill()
	if err := <-posted; err == nil || strings.Contains(err.Error(), "while the approval was open") {
		t.Fatalf("the waiting POST: %v; want it cut by the kill", err)
	}
	if _, err := st.Answer(ctx, a.ID, a.Digest, json.RawMessage(`{"approved":true}`), "alice"); err != nil {
		t.Fatal(err) // what an answerer stored before it died
	}
	pw = start(t, "parent-worker", pwEnv)
	pw.waitLog("parent-worker ready", 60*time.Second)
	notDispatched("kid-http")
	api.dispatch("kid-http", map[string]any{"parent": "boss", "approval": map[string]any{}}, child)
	api.dispatch("kid-http", map[string]any{"parent": "boss", "approval": map[string]any{}}, child) // once more: the same run
	ranOnce(t, e, "kid-http")

	// 2. An MCP task: the parent-worker that created it dies while its
	// approval is open; the ask is answered through another one's API, and
	// reading the task dispatches the run.
	c := newRawMCP(t, api.base+"/mcp")
	natstest.Eventually(t, 30*time.Second, func() bool {
		res, _ := c.call("tools/list", map[string]any{})
		return strings.Contains(string(res), `"demo"`)
	}, "demo is not listed")
	created := c.mustTask("tools/call", map[string]any{"name": "demo", "arguments": child, "_meta": map[string]any{
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
		"io.jetrun/parent":                           "boss", "io.jetrun/parentToolCallId": "call-task", "io.jetrun/approval": true}})
	if created.Status != "input_required" {
		t.Fatalf("created task %+v; want input_required", created)
	}
	a = approval(created.TaskID)
	pw.kill()
	pw = start(t, "parent-worker", pwEnv)
	pw.waitLog("parent-worker ready", 60*time.Second)
	notDispatched(created.TaskID)
	api.call("POST", "/v1/asks/"+a.ID+":answer", map[string]any{"digest": a.Digest, "value": map[string]bool{"approved": true}}, nil)
	b := newSessionlessMCP(t, api.base+"/mcp")
	done := b.pollTask(created.TaskID, "completed", func(tw taskWire) bool { return tw.Status == "completed" })
	if done.Result == nil || done.Result.IsError || !strings.Contains(string(done.Result.StructuredContent), `"steps":2`) {
		t.Fatalf("completed task %+v; want the demo's output", done)
	}
	ranOnce(t, e, created.TaskID)
}

// ranOnce waits for run id to complete and checks it ran once: attempt 1,
// one "running" status.
func ranOnce(t *testing.T, e *env, id string) {
	t.Helper()
	row := jetruntest.WaitRow(t, e.store, id, 60*time.Second, jetruntest.Final)
	statuses := jetruntest.Statuses(jetruntest.ReadEvents(t, e.js, id))
	running := 0
	for _, s := range statuses {
		if s == events.StatusRunning {
			running++
		}
	}
	if row.Status != events.StatusCompleted || row.Attempt != 1 || running != 1 || !slices.Contains(statuses, events.StatusCompleted) {
		t.Fatalf("run %s: %s at attempt %d, statuses %v; want completed at its first and only attempt", id, row.Status, row.Attempt, statuses)
	}
}

// A Go handler's delegation that needs approval (RunChild with Approval)
// survives a kill -9 of its worker while the approval is open: the answer
// comes while no worker runs the handler, the next attempt finds it, and
// the child is dispatched once and runs once.
func TestKilledHandlerAwaitingApprovalDelegatesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st, err := asks.Open(ctx, e.js, wire.Namespace(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	e.childWorker(t, "appr-demo", nil)
	a := e.nestWorker(t, "appr-a")
	const id = "approver-1"
	if _, err := e.client.Dispatch(ctx, parent.Request{AgentType: "approver", RunID: id, Input: map[string]int{"steps": 2, "stepMs": 10}}); err != nil {
		t.Fatal(err)
	}
	child := parent.RunID(id, "a1")
	ask := jetruntest.WaitAsk(t, st, asks.SignalID(id, asks.ApprovalName(child), 0), 60*time.Second,
		func(a *events.Ask) bool { return a.Status == events.AskOpen })
	a.kill()
	answered, err := st.Answer(ctx, ask.ID, ask.Digest, json.RawMessage(`{"approved":true}`), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Deliver(ctx, answered); err != nil { // as POST /v1/asks/{id}:answer does
		t.Fatal(err)
	}
	if _, _, err := e.store.Get(ctx, child); !errors.Is(err, runstore.ErrRunNotFound) {
		t.Fatalf("%s dispatched while no worker ran its parent: %v", child, err)
	}
	e.nestWorker(t, "appr-b")
	row := jetruntest.WaitRow(t, e.store, id, 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt < 2 || !strings.Contains(string(row.Output), `"child":"`+child+`"`) {
		t.Fatalf("run %s: %s at attempt %d, output %s; want completed by a later attempt with its child's output", id, row.Status, row.Attempt, row.Output)
	}
	ranOnce(t, e, child)
}

// An ask's deadline gives its default answer, through a real
// parent-worker (its keeper): a run's own wait resumes with the default,
// and a dispatch posted with an approval deadline is refused by its
// default ({"approved": false}), nothing dispatched; both answered by
// "deadline", once.
func TestAskDeadlinesApplyTheirDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	st, err := asks.Open(ctx, e.js, wire.Namespace(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	start(t, "parent-worker", map[string]string{"JETRUN_NATS_URL": e.url, "JETRUN_HTTP_ADDR": addr}).
		waitLog("parent-worker ready", 60*time.Second)
	e.nestWorker(t, "deadline-w")
	api := &apiClient{t: t, base: "http://" + addr, http: &http.Client{Timeout: time.Minute}}

	api.call("POST", "/v1/runs", map[string]any{"agentType": "deadliner", "runId": "late-1", "input": 1}, nil)
	row := jetruntest.WaitRow(t, e.store, "late-1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || string(row.Output) != `{"approved":false,"why":"nobody answered"}` {
		t.Fatalf("the run whose ask passed its deadline: %s %s; want it resumed with the default", row.Status, row.Output)
	}
	if a, _, err := st.Get(ctx, asks.SignalID("late-1", "approve", 0)); err != nil || a.Answer == nil || a.Answer.By != "deadline" {
		t.Fatalf("its ask: %+v, %v; want answered by deadline", a, err)
	}

	api.call("POST", "/v1/runs", map[string]any{"agentType": "caller", "runId": "late-boss", "input": 1}, nil) // waits on its call
	var refused struct {
		Rejected bool            `json:"rejected"`
		Output   json.RawMessage `json:"output"`
	}
	api.call("POST", "/v1/runs", map[string]any{"agentType": "deadliner", "runId": "late-kid", "input": 2, "parent": "late-boss",
		"approval": map[string]any{"deadline": "500ms"}}, &refused)
	var out bytes.Buffer
	if !refused.Rejected || json.Compact(&out, refused.Output) != nil || out.String() != `{"answer":{"approved":false},"rejected":true}` {
		t.Fatalf("the dispatch whose approval passed its deadline answered %+v (%s); want refused by the default", refused, refused.Output)
	}
	if a, _, err := st.Get(ctx, asks.SignalID("late-boss", asks.ApprovalName("late-kid"), 0)); err != nil || a.Answer == nil || a.Answer.By != "deadline" {
		t.Fatalf("the approval: %+v, %v; want answered by deadline", a, err)
	}
	if _, _, err := e.store.Get(ctx, "late-kid"); !errors.Is(err, runstore.ErrRunNotFound) {
		t.Fatalf("the refused child was dispatched: %v", err)
	}
}
