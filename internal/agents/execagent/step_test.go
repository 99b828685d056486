package execagent_test

import (
	"fmt"
	"testing"

	"github.com/jetrun/jetrun/internal/agents/execagent"
	"github.com/jetrun/jetrun/pkg/events"
)

// A step line is stored, and the next attempt's request carries it.
func TestStepReachesTheNextAttemptsRequest(t *testing.T) {
	t.Parallel()
	client, store, evs := setup(t, map[string]execagent.Config{"step": script("step.sh")})
	row := run(t, client, store, "step", "st1")
	if row.Status != events.StatusCompleted || row.Summary != "reused the plan" || row.Attempt != 2 {
		t.Fatalf("row: %s %q attempt %d (%s)", row.Status, row.Summary, row.Attempt, row.Error)
	}
	var steps []string
	for _, ev := range evs("st1") {
		if ev.Step != nil {
			steps = append(steps, ev.Step.Name+"="+string(ev.Step.Output))
		}
	}
	if fmt.Sprint(steps) != `[plan-1="tides"]` {
		t.Fatalf("steps %v", steps)
	}
}
