package execagent_test

import (
	"fmt"
	"testing"

	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/pkg/events"
)

// A step line is stored with its usage, the next attempt's request
// carries it, and its usage counts on the run once.
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
			if u := ev.Step.Usage; u == nil || u.InputTokens != 40 || u.OutputTokens != 2 {
				t.Errorf("step %s usage %+v; want 40 in, 2 out", ev.Step.Name, u)
			}
		}
	}
	if u := row.Usage; u == nil || u.InputTokens != 40 || u.OutputTokens != 2 {
		t.Errorf("run usage %+v; want the step's once", u)
	}
	if fmt.Sprint(steps) != `[plan-1="tides"]` {
		t.Fatalf("steps %v", steps)
	}
}
