package jetruntype

import (
	"fmt"
	"slices"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// UsageTotals and Usage are the events package's (a run's usage travels
// on its status events).
type (
	UsageTotals = events.UsageTotals
	Usage       = events.Usage
)

// Overrun says which budget of a tree was exceeded and by how much.
type Overrun struct {
	// Owner is the run that carries the budget (the top of the stopped
	// subtree).
	Owner string `json:"owner"`
	// Budget names the bound: "tokens", "costMicros" or "runs".
	Budget string `json:"budget"`
	Limit  int64  `json:"limit"`
	Used   int64  `json:"used"`
}

// By is how far past its limit the budget went.
func (o Overrun) By() int64 { return o.Used - o.Limit }

func (o Overrun) String() string {
	return fmt.Sprintf("the %s budget of run %s (%d) was exceeded by %d (used %d)", o.Budget, o.Owner, o.Limit, o.By(), o.Used)
}

// treeRoot is the id of the top of r's tree (r's own id at the top).
func (r *Run) treeRoot() string {
	if r.Root != "" {
		return r.Root
	}
	return r.ID
}

// Charges lists the runs whose tree totals r's usage adds to: the top of
// its tree, every ancestor that carries a budget, and r itself when it
// carries one.
func (r *Run) Charges() []string {
	out := []string{r.treeRoot()}
	for _, id := range r.BudgetFrom {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	if r.Budget != nil && !slices.Contains(out, r.ID) {
		out = append(out, r.ID)
	}
	return out
}

// Budgeted reports whether r draws from any budget: its usage is then
// charged to its tree at every report, not only at row syncs.
func (r *Run) Budgeted() bool { return r.Budget != nil || len(r.BudgetFrom) > 0 }

// ChildTree returns the Root and BudgetFrom of a run nested under r.
func (r *Run) ChildTree() (root string, budgetFrom []string) {
	budgetFrom = slices.Clone(r.BudgetFrom)
	if r.Budget != nil {
		budgetFrom = append(budgetFrom, r.ID)
	}
	return r.treeRoot(), budgetFrom
}

// overrun returns the first bound of r's budget its tree totals exceed.
func (r *Run) overrun() *Overrun {
	b, t := r.Budget, r.TreeUsage
	if b == nil {
		return nil
	}
	var tot UsageTotals
	if t != nil {
		tot = *t
	}
	switch {
	case b.Tokens > 0 && tot.Tokens() > b.Tokens:
		return &Overrun{Owner: r.ID, Budget: "tokens", Limit: b.Tokens, Used: tot.Tokens()}
	case b.CostMicros > 0 && tot.CostMicros > b.CostMicros:
		return &Overrun{Owner: r.ID, Budget: "costMicros", Limit: b.CostMicros, Used: tot.CostMicros}
	}
	return nil
}

// Charge adds d to r's tree totals, as a Mutate function would. It
// returns the overrun when the addition takes r's tree past its budget for
// the first time (nil otherwise: within budget, or already over).
func (r *Run) Charge(d UsageTotals) *Overrun {
	was := r.Overrun
	t := UsageTotals{}
	if r.TreeUsage != nil {
		t = *r.TreeUsage
	}
	t = t.Add(d)
	r.TreeUsage = &t
	if was != nil {
		return nil
	}
	if o := r.overrun(); o != nil {
		r.Overrun = o
		return o
	}
	return nil
}

// ChargeRun counts one more nested run against r's runs budget, as a
// Mutate function would: over the bound it changes nothing and returns the
// overrun the new run would cause.
func (r *Run) ChargeRun() *Overrun {
	if r.Budget != nil && r.Budget.Runs > 0 && r.TreeRuns+1 > r.Budget.Runs {
		return &Overrun{Owner: r.ID, Budget: "runs", Limit: r.Budget.Runs, Used: r.TreeRuns + 1}
	}
	r.TreeRuns++
	return nil
}

// StopForBudget gives r up because the budget o of its tree was exceeded,
// as a Mutate function would: soft interrupted, reason budget-exceeded,
// with the overrun recorded; a run a live worker executes (held) keeps its
// worker until it stopped (cancelRequested tells it to). It returns
// ErrNoChange for a run that is no longer live or already stopped for a
// budget.
func (r *Run) StopForBudget(o Overrun, held bool, now time.Time) error {
	switch {
	case r.Status.Final(), r.Status == events.StatusInterrupted:
		return ErrNoChange
	}
	if r.Overrun == nil || r.Overrun.Owner != o.Owner {
		oc := o
		r.Overrun = &oc
	}
	still := held && r.Status == events.StatusRunning
	r.Interrupt(events.ReasonBudgetExceeded, o.String(), still, now)
	if still {
		r.CancelRequested, r.CancelReason = true, events.ReasonBudgetExceeded
	}
	return nil
}

func cloneTreeFields(c, r *Run) {
	c.Usage = r.Usage.Clone()
	if r.TreeUsage != nil {
		t := *r.TreeUsage
		c.TreeUsage = &t
	}
	if r.Budget != nil {
		b := *r.Budget
		c.Budget = &b
	}
	if r.Overrun != nil {
		o := *r.Overrun
		c.Overrun = &o
	}
	c.BudgetFrom = slices.Clone(r.BudgetFrom)
}
