package e2e_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A Python exec child reports usage per model call; its worker is killed
// (kill -9) mid-run and another takes the run over. The row's usage keeps
// what attempt 1 had synced and adds attempt 2's: the calls attempt 1 paid
// for count, and only a call reported after the row's last sync can be
// lost with the worker (examples/python/spender.py).
func TestPythonExecChildUsageAcrossAKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agents := map[string]string{"JETRUN_EXEC_AGENTS": "spender=" + python3(t) + " " + examples(t, "python", "spender.py")}
	a := e.childWorker(t, "sp-a", agents)

	const calls = 30
	e.dispatchInput(t, "spender", "sp-k", map[string]any{"calls": calls, "delay": 0.1})
	before := jetruntest.WaitRow(t, e.store, "sp-k", 30*time.Second, func(r *model.Row) bool {
		return r.Usage != nil && r.Usage.InputTokens >= 300
	})
	a.kill()
	e.childWorker(t, "sp-b", agents)

	row := jetruntest.WaitRow(t, e.store, "sp-k", 90*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("row: %s attempt %d (%s)", row.Status, row.Attempt, row.Error)
	}
	var out struct {
		CallsHere int `json:"callsHere"`
	}
	if err := json.Unmarshal(row.Output, &out); err != nil {
		t.Fatal(err)
	}
	// Attempt 1 paid for calls-callsHere calls (each finished with a
	// milestone) and maybe one more it had reported when it was killed.
	low := before.Usage.InputTokens + int64(out.CallsHere)*100
	high := int64(calls+1) * 100
	u := row.Usage
	if u == nil || u.InputTokens < low || u.InputTokens > high || u.OutputTokens*5 != u.InputTokens ||
		u.CostMicros*2 != u.InputTokens*3 || u.Models["toy-model"] != u.UsageTotals {
		t.Fatalf("usage %+v; want input tokens in [%d, %d] (synced before the kill %d, attempt 2 ran %d calls)",
			u, low, high, before.Usage.InputTokens, out.CallsHere)
	}
	if row.TreeUsage == nil || row.TreeUsage.InputTokens < low || row.TreeUsage.InputTokens > high {
		t.Fatalf("tree usage %+v, want input tokens in [%d, %d]", row.TreeUsage, low, high)
	}
}

// The same Python child dispatched with a token budget: the usage line
// that goes past it stops the run, interrupted with reason
// budget-exceeded, and no call is paid after the one that crossed it.
func TestPythonExecChildStoppedByItsBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "sp-budget", map[string]string{
		"JETRUN_EXEC_AGENTS": "spender=" + python3(t) + " " + examples(t, "python", "spender.py"),
		"JETRUN_EXEC_GRACE":  "1s",
	})
	if _, err := e.client.Dispatch(context.Background(), parent.Request{AgentType: "spender", RunID: "sp-b",
		Input: map[string]any{"calls": 50, "delay": 0.02}, Budget: &events.TreeBudget{Tokens: 500}}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "sp-b", 60*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusInterrupted && r.Worker == ""
	})
	// 120 tokens a call: the fifth call (600) crosses 500.
	if row.Reason != events.ReasonBudgetExceeded || row.Overrun == nil || row.Overrun.Used != 600 ||
		row.TreeUsage == nil || row.TreeUsage.Tokens() != 600 {
		t.Fatalf("row: %s %q overrun %+v tree %+v (%s)", row.Status, row.Reason, row.Overrun, row.TreeUsage, row.Error)
	}
}
