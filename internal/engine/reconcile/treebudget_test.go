package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// A stop for a tree's budget cut short (the parent was stopped, a child
// was not) is completed by the reconciler: the child ends interrupted,
// budget-exceeded, with the parent's overrun; it is not aborted by the
// cancel cascade.
func TestReconcilerCompletesABudgetStop(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true})
	ctx := context.Background()
	now := time.Now()
	o := &jetruntype.Overrun{Owner: "bp", Budget: "tokens", Limit: 10, Used: 15}
	for _, r := range []*model.Row{
		{ID: "bp", AgentType: "demo", Status: events.StatusInterrupted, Reason: events.ReasonBudgetExceeded,
			CancelRequested: true, Overrun: o, Budget: &events.TreeBudget{Tokens: 10}, CreatedAt: now, FinishedAt: now},
		{ID: "bc", AgentType: "demo", Parent: "bp", Root: "bp", BudgetFrom: []string{"bp"}, Depth: 1,
			Status: events.StatusRunning, Attempt: 1, Worker: "ghost", LeaseUntil: now.Add(time.Hour), CreatedAt: now},
	} {
		if _, err := e.store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.recon.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	row, _, err := e.store.Get(ctx, "bc")
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != events.StatusInterrupted || row.Reason != events.ReasonBudgetExceeded ||
		row.Overrun == nil || *row.Overrun != *o {
		t.Fatalf("child: %s %q overrun %+v", row.Status, row.Reason, row.Overrun)
	}
}
