package e2e_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// An exec agent type described by JETRUN_AGENT_SCHEMAS_DIR, served by two
// child-worker processes: the registry lists it with its schemas and both
// workers; a bad input is refused by the parent API and dead-lettered from
// a plain publish; a good one runs. One worker is killed with -9: its
// announcement expires with its TTL and the type is listed with one worker.
func TestRegistryOfAConfiguredExecAgentAcrossAKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	schema := `{"description":"Counts down to liftoff.",
	  "inputSchema":{"type":"object","required":["from"],"properties":{"from":{"type":"integer","minimum":1},"delay":{"type":"number"}},"additionalProperties":false},
	  "outputSchema":{"type":"object","required":["from"],"properties":{"from":{"type":"integer"}}}}`
	if err := os.WriteFile(filepath.Join(dir, "countdown.json"), []byte(schema), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"JETRUN_EXEC_AGENTS":       "countdown=" + examples(t, "shell", "countdown.sh"),
		"JETRUN_AGENT_SCHEMAS_DIR": dir,
	}
	victim := e.childWorker(t, "reg-a", vars)
	e.childWorker(t, "reg-b", vars)
	ctx := context.Background()

	countdown := func() registry.Agent {
		list, err := e.client.Agents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			if a.AgentType == "countdown" {
				return a
			}
		}
		return registry.Agent{}
	}
	if a := countdown(); a.Workers != 2 || a.Description != "Counts down to liftoff." || !strings.Contains(string(a.InputSchema), `"from"`) {
		t.Fatalf("countdown in the registry: %+v", a)
	}

	_, err := e.client.Dispatch(ctx, parent.Request{AgentType: "countdown", RunID: "reg-bad", Input: map[string]any{"from": "three"}})
	if !errors.Is(err, parent.ErrBadRequest) || !errors.Is(err, registry.ErrSchemaMismatch) {
		t.Fatalf("dispatch with a bad input: %v", err)
	}
	if _, err := e.js.Publish(ctx, "jetrun.dispatch.countdown", []byte(`{"runId":"reg-plain","input":{"from":0}}`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		s, err := e.js.Stream(ctx, "JETRUN_DLQ")
		if err != nil {
			return false
		}
		m, err := s.GetLastMsgForSubject(ctx, "jetrun.dlq.countdown")
		return err == nil && strings.Contains(m.Header.Get(events.HeaderReason), "input of agent type countdown does not match the schema")
	}, "the plain dispatch with a bad input was not dead-lettered with the schema error")
	e.dispatchInput(t, "countdown", "reg-good", map[string]any{"from": 2, "delay": 0.01})
	if row := jetruntest.WaitRow(t, e.store, "reg-good", 30*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
		t.Fatalf("good run: %s %s", row.Status, row.Error)
	}

	victim.kill()
	natstest.Eventually(t, registry.DefaultTTL+30*time.Second, func() bool {
		a := countdown()
		return a.Workers == 1 && a.WorkerIDs[0] == "reg-b"
	}, "the killed worker's announcement did not expire")
}
