package model

import (
	"slices"

	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// treeRoot is the id of the top of r's tree (r's own id at the top).
func (r *Row) treeRoot() string {
	if r.Root != "" {
		return r.Root
	}
	return r.ID
}

// Charges lists the runs whose tree totals r's usage adds to: the top of
// its tree, every ancestor that carries a budget, and r itself when it
// carries one.
func (r *Row) Charges() []string {
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
func (r *Row) Budgeted() bool { return r.Budget != nil || len(r.BudgetFrom) > 0 }

// ChildTree returns the Root and BudgetFrom of a run nested under r.
func (r *Row) ChildTree() (root string, budgetFrom []string) {
	budgetFrom = slices.Clone(r.BudgetFrom)
	if r.Budget != nil {
		budgetFrom = append(budgetFrom, r.ID)
	}
	return r.treeRoot(), budgetFrom
}

// overrun returns the first bound of r's budget its tree totals exceed.
func (r *Row) overrun() *jetruntype.Overrun {
	b, t := r.Budget, r.TreeUsage
	if b == nil {
		return nil
	}
	var tot jetruntype.UsageTotals
	if t != nil {
		tot = *t
	}
	switch {
	case b.Tokens > 0 && tot.Tokens() > b.Tokens:
		return &jetruntype.Overrun{Owner: r.ID, Budget: "tokens", Limit: b.Tokens, Used: tot.Tokens()}
	case b.CostMicros > 0 && tot.CostMicros > b.CostMicros:
		return &jetruntype.Overrun{Owner: r.ID, Budget: "costMicros", Limit: b.CostMicros, Used: tot.CostMicros}
	}
	return nil
}

// charge adds d to r's tree totals, as a Mutate function would. It
// returns the overrun when the addition takes r's tree past its budget for
// the first time (nil otherwise: within budget, or already over).
func (r *Row) charge(d jetruntype.UsageTotals) *jetruntype.Overrun {
	was := r.Overrun
	t := jetruntype.UsageTotals{}
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

// MaxChargeMarks bounds a row's ChargeMarks: the marks of the charges of
// that many attempts are kept, the least recently charged dropped first.
// A charge is sent again only while its attempt's worker holds its runs,
// right after a fault; it lands once unless more than MaxChargeMarks other
// attempts charged the same row in between.
const MaxChargeMarks = 64

// chargeOnce adds d to r's tree totals as the charge by, as a Mutate
// function would, once: a charge r has a mark of (a retry of one whose
// answer was lost) changes nothing and reports dup. Charges of one attempt
// to r come one at a time, in the order of their sequences: r keeps the
// last mark of each attempt, and drops those of the run's earlier
// attempts (a run is taken over only once its earlier attempt stopped
// charging). crossed is as Charge's.
func (r *Row) chargeOnce(by ChargeMark, d jetruntype.UsageTotals) (crossed *jetruntype.Overrun, dup bool) {
	for _, m := range r.ChargeMarks {
		if m.Run == by.Run && m.Attempt == by.Attempt && m.Seq >= by.Seq {
			return nil, true
		}
	}
	crossed = r.charge(d)
	marks := make([]ChargeMark, 0, len(r.ChargeMarks)+1)
	for _, m := range r.ChargeMarks {
		if m.Run != by.Run || m.Attempt > by.Attempt {
			marks = append(marks, m)
		}
	}
	marks = append(marks, by)
	if n := len(marks) - MaxChargeMarks; n > 0 {
		marks = slices.Clone(marks[n:])
	}
	r.ChargeMarks = marks
	return crossed, false
}

// countStoredSteps counts on r what its stored steps spent (stored, their
// usage added up) beyond what r counts of them already (StepUsage), as a
// Mutate function would: it is added to r's usage and StepUsage moves on
// with it; on the top of a tree without a budget, to its tree totals too
// (the one tree total a step's usage is not charged to before the step is
// stored). It is for a run no attempt executes any more (an attempt counts
// its own steps in its row writes) and reports whether r changed; applied
// again it changes nothing.
func (r *Row) countStoredSteps(stored jetruntype.Usage) bool {
	var had, u jetruntype.Usage
	if r.StepUsage != nil {
		had = *r.StepUsage
	}
	missing := MinusUsage(stored, had)
	if IsZeroUsage(missing) {
		return false
	}
	if r.Usage != nil {
		u = *r.Usage
	}
	u, had = PlusUsage(u, missing), PlusUsage(had, missing)
	r.Usage, r.StepUsage = &u, &had
	if !r.Budgeted() && r.Root == "" && r.Parent == "" && !IsZeroTotals(missing.UsageTotals) {
		r.charge(missing.UsageTotals) // no budget: never an overrun
	}
	return true
}

// chargeRun counts one more nested run against r's runs budget, as a
// Mutate function would: over the bound it changes nothing and returns the
// overrun the new run would cause.
func (r *Row) chargeRun() *jetruntype.Overrun {
	if r.Budget != nil && r.Budget.Runs > 0 && r.TreeRuns+1 > r.Budget.Runs {
		return &jetruntype.Overrun{Owner: r.ID, Budget: "runs", Limit: r.Budget.Runs, Used: r.TreeRuns + 1}
	}
	r.TreeRuns++
	return nil
}

func cloneTreeFields(c, r *Row) {
	c.Usage = CloneUsage(r.Usage)
	c.StepUsage = CloneUsage(r.StepUsage)
	if r.TreeUsage != nil {
		t := *r.TreeUsage
		c.TreeUsage = &t
	}
	c.ChargeMarks = slices.Clone(r.ChargeMarks)
	c.Holds = slices.Clone(r.Holds)
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
