package execagent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A re-run of an exec child from its step "three" carries the steps
// before it in its request's "steps", as stored by the run it re-runs;
// the child does only step three, and only its usage is counted.
func TestRerunRequestCarriesTheGivenSteps(t *testing.T) {
	t.Parallel()
	client, store, evs := setup(t, map[string]execagent.Config{"given": script("given.sh")})
	row := run(t, client, store, "given", "g1")
	var req struct {
		Steps map[string]string `json:"steps"`
	}
	if err := json.Unmarshal(row.Output, &req); err != nil || row.Status != events.StatusCompleted || len(req.Steps) != 0 {
		t.Fatalf("original: %s %s (%v)", row.Status, row.Output, err)
	}
	if _, err := client.Rerun(context.Background(), "g1", parent.RerunRequest{FromStep: "three", RunID: "g1-again"}); err != nil {
		t.Fatal(err)
	}
	again := jetruntest.WaitRow(t, store, "g1-again", 30*time.Second, jetruntest.Final)
	req.Steps = nil
	if err := json.Unmarshal(again.Output, &req); err != nil || again.Status != events.StatusCompleted {
		t.Fatalf("re-run: %s %s (%v)", again.Status, again.Output, err)
	}
	if len(req.Steps) != 2 || req.Steps["one"] != "one done" || req.Steps["two"] != "two done" {
		t.Errorf("re-run's request carried steps %v, want one and two", req.Steps)
	}
	var stored []string
	for _, ev := range evs("g1-again") {
		if st := ev.Step; st != nil {
			stored = append(stored, st.Name+"@"+st.GivenFrom)
		}
	}
	if len(stored) != 3 || stored[0] != "one@g1" || stored[1] != "two@g1" || stored[2] != "three@" {
		t.Errorf("re-run's stored steps %v", stored)
	}
	if row.Usage.OutputTokens != 15 || again.Usage == nil || again.Usage.OutputTokens != 5 {
		t.Errorf("usage: original %+v, re-run %+v; want 15 and 5 output tokens", row.Usage, again.Usage)
	}
}
