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

// Usage lines right before a step line are what the step spent: stored
// with it and counted on the run once, with it. A usage line followed by
// another line is the run's; so is one before a step line whose step was
// stored already (the child did the work again).
func TestUsageLinesBeforeAStepLineAreStoredWithIt(t *testing.T) {
	t.Parallel()
	client, store, evs := setup(t, map[string]execagent.Config{"usagestep": script("usagestep.sh")})
	row := run(t, client, store, "usagestep", "us1")
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("row: %s attempt %d (%s)", row.Status, row.Attempt, row.Error)
	}
	step := events.UsageTotals{InputTokens: 40, OutputTokens: 2}
	var stored []events.UsageTotals
	for _, ev := range evs("us1") {
		if st := ev.Step; st != nil {
			if st.Usage == nil {
				t.Fatalf("step %s stored without usage", st.Name)
			}
			stored = append(stored, st.Usage.UsageTotals)
		}
	}
	if len(stored) != 1 || stored[0] != step {
		t.Errorf("stored step usage %+v; want [%+v]", stored, step)
	}
	want := events.UsageTotals{InputTokens: 52, OutputTokens: 2}
	if u := row.Usage; u == nil || u.UsageTotals != want || u.Models["m1"] != want {
		t.Errorf("run usage %+v; want %+v, each line once", u, want)
	}
	if u := row.StepUsage; u == nil || u.UsageTotals != step {
		t.Errorf("run step usage %+v; want %+v", u, step)
	}
}

// A step line may carry several usage reports (one per model call) as an
// array: each is the step's, stored with it and counted on the run once,
// per model.
func TestAStepLineCarriesSeveralUsageReports(t *testing.T) {
	t.Parallel()
	client, store, evs := setup(t, map[string]execagent.Config{"usagearray": script("usagearray.sh")})
	row := run(t, client, store, "usagearray", "ua1")
	if row.Status != events.StatusCompleted {
		t.Fatalf("row: %s (%s)", row.Status, row.Error)
	}
	want := events.UsageTotals{InputTokens: 40, OutputTokens: 6, CostMicros: 9}
	var stored []events.UsageTotals
	for _, ev := range evs("ua1") {
		if st := ev.Step; st != nil && st.Usage != nil {
			stored = append(stored, st.Usage.UsageTotals)
		}
	}
	if len(stored) != 1 || stored[0] != want {
		t.Errorf("stored step usage %+v; want [%+v]", stored, want)
	}
	u := row.Usage
	if u == nil || u.UsageTotals != want {
		t.Fatalf("run usage %+v; want %+v", u, want)
	}
	if m1, m2 := u.Models["m1"], u.Models["m2"]; m1 != (events.UsageTotals{InputTokens: 40, OutputTokens: 4}) ||
		m2 != (events.UsageTotals{OutputTokens: 2, CostMicros: 9}) {
		t.Errorf("per model m1 %+v m2 %+v", m1, m2)
	}
	if s := row.StepUsage; s == nil || s.UsageTotals != want {
		t.Errorf("run step usage %+v; want %+v", s, want)
	}
}
