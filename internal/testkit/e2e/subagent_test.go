package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A persistent sub-agent session survives kill -9: the Python memo agent
// (examples/python/memo.py, on the jetrun library) runs three turns under
// one session key; the worker running the second is killed with -9
// mid-turn. The takeover, on another worker, sees the same history as the
// killed attempt (the first turn, with its step), and the third turn sees
// both earlier turns, in order, with their steps.
func TestSubAgentSessionSurvivesAKilledWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agents := map[string]string{"JETRUN_EXEC_AGENTS": "memo=" + python3(t) + " " + examples(t, "python", "memo.py")}
	a := e.childWorker(t, "memo-a", agents)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	turn := func(id string, input map[string]any) {
		t.Helper()
		if _, err := e.client.Dispatch(ctx, parent.Request{AgentType: "memo", RunID: id, Session: "notes", Input: input}); err != nil {
			t.Fatal(err)
		}
	}
	type memo struct {
		Session string
		Heard   []string
		Attempt int
	}
	outcome := func(id string) (memo, *model.Row) {
		t.Helper()
		row := jetruntest.WaitRow(t, e.store, id, 90*time.Second, jetruntest.Final)
		var m memo
		if row.Status != events.StatusCompleted || json.Unmarshal(row.Output, &m) != nil {
			t.Fatalf("run %s: %s %s (%s)", id, row.Status, row.Output, row.Error)
		}
		return m, row
	}

	turn("memo-1", map[string]any{"objective": "remember 7"})
	if m, _ := outcome("memo-1"); m.Session != "notes" || len(m.Heard) != 0 {
		t.Fatalf("first turn: %+v", m)
	}

	gate := filepath.Join(t.TempDir(), "gate")
	turn("memo-2", map[string]any{"objective": "and 8", "gate": gate})
	natstest.Eventually(t, 60*time.Second, func() bool {
		return len(storedSteps(jetruntest.ReadEvents(t, e.js, "memo-2"))) == 1
	}, "the second turn did not store its step")
	a.kill()
	e.childWorker(t, "memo-b", agents)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, row := outcome("memo-2")
	if row.Attempt != 2 || m.Attempt != 2 || len(m.Heard) != 1 || m.Heard[0] != "remember 7" {
		t.Fatalf("second turn, taken over: attempt %d, %+v", row.Attempt, m)
	}

	turn("memo-3", map[string]any{"objective": "sum them"})
	if m, _ := outcome("memo-3"); len(m.Heard) != 2 || m.Heard[0] != "remember 7" || m.Heard[1] != "and 8" {
		t.Fatalf("third turn: %+v", m)
	}
}

// Sub-agents from a Python child (sdk/python's run_sub_agent) under a real
// parent-worker: a delegate with an overridden name and description and a
// session (the memo agent: its second call sees the first as history), a mistake
// answered as text, a dynamic agent run as a child of the generic type
// that cannot create another, a spec tool outside the pool, and variables:
// the caller's go down in each child's input, the one the dynamic agent
// sets comes back to the caller as a step named as the Go worker names it.
func TestPythonSubAgents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	py := python3(t)
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_NATS_URL":    e.url,
		"JETRUN_WORKER_ID":   "py-subagents",
		"JETRUN_HTTP_ADDR":   addr,
		"JETRUN_CHILDREN":    "demo",
		"JETRUN_DEMO_RUNS":   "0",
		"JETRUN_CONCURRENCY": "8",
		"JETRUN_EXEC_AGENTS": "memo=" + py + " " + examples(t, "python", "memo.py") +
			",py-orchestrator=" + py + " " + filepath.Join(sdkPython(t), "tests", "live_subagents.py") + " http://" + addr,
		"PYTHONPATH": sdkPython(t),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	calls := []map[string]any{
		{"id": "c1", "tool": "ask_memo", "args": map[string]any{"objective": "remember 7"}},
		{"id": "c2", "tool": "ask_memo", "args": `{"objective": "what was it", "context": "the number"}`},
		{"id": "c3", "tool": "task_memo", "args": map[string]any{"objective": "x"}},
		{"id": "c4", "tool": "create_and_run_agent", "args": map[string]any{"spec": map[string]any{"name": "scout", "prompt": "find", "tools": []string{"search"}}, "objective": "map"}},
		{"id": "c5", "tool": "create_and_run_agent", "args": map[string]any{"spec": map[string]any{"name": "scout", "prompt": "find", "tools": []string{"teleport"}}, "objective": "map"}},
	}
	res, err := e.client.Run(ctx, parent.Request{AgentType: "py-orchestrator", RunID: "py-orch", Input: map[string]any{"calls": calls}})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Tools         []string
		Descriptions  map[string]string
		Answers       []string
		Variables     map[string]string
		VariableSteps []string
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(out.Variables, map[string]string{"topic": "tides", "found": "map"}) ||
		!slices.Equal(out.VariableSteps, []string{"variables.1.1", "variables.1.2"}) {
		t.Errorf("caller's variables %v, steps %v: want topic=tides and found=map (set by its dynamic child)", out.Variables, out.VariableSteps)
	}
	if !slices.Equal(out.Tools, []string{"ask_memo(objective)", "create_and_run_agent(spec,objective)"}) {
		t.Errorf("tools %v", out.Tools)
	}
	if d := out.Descriptions["ask_memo"]; d != "Remembers what it was told." {
		t.Errorf("ask_memo's description %q: want the overriding one", d)
	}
	want := []string{
		`{"session": "py-notes", "heard": [], "attempt": 1}`,
		`{"session": "py-notes", "heard": ["remember 7"], "attempt": 1}`,
		`error: unknown tool "task_memo": use one of [ask_memo, create_and_run_agent]`,
		`{"dynamic": "scout", "objective": "map", "tools": ["ask_memo(objective)"], "nested": "error: a dynamic agent cannot create dynamic agents", "seen": {"topic": "tides"}}`,
		`error: create_and_run_agent: unknown tool "teleport": choose from the pool [search, fetch]`,
	}
	if !slices.Equal(out.Answers, want) {
		t.Errorf("answers\n%q\nwant\n%q", out.Answers, want)
	}
	kid := jetruntest.WaitRow(t, e.store, parent.RunID("py-orch", "c2"), 10*time.Second, jetruntest.Final)
	if kid.Parent != "py-orch" || kid.AgentType != "memo" || kid.Session != "py-notes" || string(kid.Input) != `{"objective":"what was it","context":"the number","variables":{"topic":"tides"}}` {
		t.Errorf("delegated child: parent %q type %q session %q input %s", kid.Parent, kid.AgentType, kid.Session, kid.Input)
	}
}
