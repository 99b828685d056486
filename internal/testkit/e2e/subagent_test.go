package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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
