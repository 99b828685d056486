package demo_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A demo run's research is a durable step per step, each storing its
// finding with what it spent, and the spending adds up on the run's row:
// a trace of the run has steps and usage to show.
func TestDemoStoresAStepPerLeadWithUsage(t *testing.T) {
	t.Parallel()
	e := jetruntest.NewEnv(t)
	e.StartWorker(t, worker.Config{Concurrency: 2}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 3
	if _, err := e.Client.Run(ctx, parent.Request{AgentType: demo.AgentType, RunID: "stepped",
		Input: map[string]int{"steps": n, "stepMs": 20}}); err != nil {
		t.Fatal(err)
	}
	steps, err := e.Client.Steps(ctx, "stepped")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != n {
		t.Fatalf("%d steps stored, want %d: %+v", len(steps), n, steps)
	}
	for i, st := range steps {
		var f demo.Finding
		if err := json.Unmarshal(st.Output, &f); err != nil || st.Name != demo.StepName(i+1) || f.Lead != i+1 || f.Finding == "" {
			t.Errorf("step %d: %s %s (%v)", i+1, st.Name, st.Output, err)
		}
		if st.Usage == nil || st.Usage.InputTokens != demo.LeadUsage.InputTokens || st.Usage.CostMicros != demo.LeadUsage.CostMicros {
			t.Errorf("step %s usage %+v, want %+v", st.Name, st.Usage, demo.LeadUsage)
		}
		if st.DurationMs < 20 {
			t.Errorf("step %s took %d ms; its research waits 20", st.Name, st.DurationMs)
		}
	}
	row, err := e.Client.Inspect(ctx, "stepped")
	if err != nil {
		t.Fatal(err)
	}
	want := events.UsageTotals{InputTokens: n * demo.LeadUsage.InputTokens, OutputTokens: n * demo.LeadUsage.OutputTokens,
		CostMicros: n * demo.LeadUsage.CostMicros}
	if row.Usage == nil || row.Usage.UsageTotals != want || row.Usage.Models[demo.LeadUsage.Model] != want {
		t.Fatalf("row usage %+v, want %+v on model %s", row.Usage, want, demo.LeadUsage.Model)
	}
}
