package execagent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A reserve line is answered on stdin: the first fits the budget, the
// usage line after it settles it, and the second, past the budget, is
// refused with reason budget-exceeded; nothing stays held.
func TestReserveLineGetsTheAnswerOnStdin(t *testing.T) {
	t.Parallel()
	client, store, _ := setup(t, map[string]execagent.Config{"reserver": script("reserve.sh")})
	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "reserver", RunID: "rv1", Input: 1,
		Budget: &events.TreeBudget{Tokens: 1000}}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "rv1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("row: %s %q (%s)", row.Status, row.Summary, row.Error)
	}
	var answers []struct{ Reserved eventline.Reserved }
	if err := json.Unmarshal(row.Output, &answers); err != nil || len(answers) != 2 {
		t.Fatalf("output %s: %v", row.Output, err)
	}
	if a := answers[0].Reserved; !a.OK || a.Reason != "" {
		t.Errorf("first answer %+v; want ok", a)
	}
	if a := answers[1].Reserved; a.OK || a.Reason != events.ReasonBudgetExceeded || !strings.Contains(a.Error, "tokens") {
		t.Errorf("second answer %+v; want refused, budget-exceeded, naming the tokens budget", a)
	}
	if row.TreeUsage == nil || row.TreeUsage.Tokens() != 600 || len(row.Holds) != 0 {
		t.Fatalf("tree usage %+v, holds %+v; want 600 tokens spent, none held", row.TreeUsage, row.Holds)
	}
}

// A reserve line with a negative amount breaks the format: the run ends
// error naming the line, and nothing is reserved.
func TestBadReserveLineEndsTheRun(t *testing.T) {
	t.Parallel()
	client, store, _ := setup(t, map[string]execagent.Config{"badreserve": script("badreserve.sh")})
	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "badreserve", RunID: "rv2", Input: 1,
		Budget: &events.TreeBudget{Tokens: 1000}}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "rv2", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || !strings.Contains(row.Error, "line 1") || !strings.Contains(row.Error, "must not be negative") {
		t.Fatalf("row: %s %q", row.Status, row.Error)
	}
	if len(row.Holds) != 0 {
		t.Fatalf("holds %+v; want none", row.Holds)
	}
}
