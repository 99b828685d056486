package events

import (
	"errors"
	"fmt"
	"maps"
)

// UsageReport is one report of what a run spent: tokens and cost (in
// millionths of the caller's currency unit) on a model. Every field is
// optional; reports add up. It is the payload of an event line
// {"usage": {...}} and of worker.Run.Usage.
type UsageReport struct {
	InputTokens  int64  `json:"inputTokens,omitempty"`
	OutputTokens int64  `json:"outputTokens,omitempty"`
	CostMicros   int64  `json:"costMicros,omitempty"`
	Model        string `json:"model,omitempty"`
}

// MaxModelNameLength bounds UsageReport.Model.
const MaxModelNameLength = 128

// MaxUsageModels bounds the models a run's usage is kept per (Usage.Models):
// reports on more models count only in the totals, so a row stays small.
const MaxUsageModels = 32

// Validate checks that u's counts are not negative and its model name fits.
func (u UsageReport) Validate() error {
	var errs []error
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CostMicros < 0 {
		errs = append(errs, errors.New("usage counts must not be negative"))
	}
	if len(u.Model) > MaxModelNameLength {
		errs = append(errs, fmt.Errorf("usage model name is %d bytes; the limit is %d", len(u.Model), MaxModelNameLength))
	}
	return errors.Join(errs...)
}

// Empty reports whether u adds nothing.
func (u UsageReport) Empty() bool {
	return u.InputTokens == 0 && u.OutputTokens == 0 && u.CostMicros == 0
}

// TreeBudget bounds what a run and every run nested under it may spend
// together: tokens (input plus output), cost in micros, and the number of
// nested runs started. A zero field sets no bound.
//
// Nested runs draw from the budget of every ancestor that carries one; a
// nested run may carry a smaller budget of its own for its own subtree.
// Usage past a budget stops the subtree of the run that carries it: every
// live run in it ends interrupted with reason budget-exceeded.
type TreeBudget struct {
	Tokens     int64 `json:"tokens,omitempty"`
	CostMicros int64 `json:"costMicros,omitempty"`
	Runs       int64 `json:"runs,omitempty"`
}

// Validate checks that b's bounds are not negative.
func (b *TreeBudget) Validate() error {
	if b == nil {
		return nil
	}
	if b.Tokens < 0 || b.CostMicros < 0 || b.Runs < 0 {
		return errors.New(`"budget" bounds must not be negative`)
	}
	return nil
}

// validateTree checks the budget and tree fields of d.
func (d *Dispatch) validateTree() []error {
	var errs []error
	if err := d.Budget.Validate(); err != nil {
		errs = append(errs, err)
	}
	if d.Root != "" {
		if err := ValidateID(d.Root); err != nil {
			errs = append(errs, fmt.Errorf(`"root": %w`, err))
		}
	}
	for _, id := range d.BudgetFrom {
		if err := ValidateID(id); err != nil {
			errs = append(errs, fmt.Errorf(`"budgetFrom": %w`, err))
		}
	}
	return errs
}

// UsageTotals is what a run, or a tree of runs, spent.
type UsageTotals struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	CostMicros   int64 `json:"costMicros"`
}

// Tokens is the input plus output tokens.
func (u UsageTotals) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// Add returns u plus v.
func (u UsageTotals) Add(v UsageTotals) UsageTotals {
	return UsageTotals{u.InputTokens + v.InputTokens, u.OutputTokens + v.OutputTokens, u.CostMicros + v.CostMicros}
}

// Sub returns u minus v.
func (u UsageTotals) Sub(v UsageTotals) UsageTotals {
	return UsageTotals{u.InputTokens - v.InputTokens, u.OutputTokens - v.OutputTokens, u.CostMicros - v.CostMicros}
}

// IsZero reports whether u counts nothing.
func (u UsageTotals) IsZero() bool { return u == UsageTotals{} }

// TotalsOf returns the totals of one report.
func TotalsOf(r UsageReport) UsageTotals {
	return UsageTotals{r.InputTokens, r.OutputTokens, r.CostMicros}
}

// Usage is a run's own usage: its totals across attempts, and per model
// (reports without a model count only in the totals).
type Usage struct {
	UsageTotals
	Models map[string]UsageTotals `json:"models,omitempty"`
}

// Add adds one report to u (per model for the first MaxUsageModels models).
func (u *Usage) Add(r UsageReport) {
	t := TotalsOf(r)
	u.UsageTotals = u.UsageTotals.Add(t)
	if _, known := u.Models[r.Model]; r.Model != "" && (known || len(u.Models) < MaxUsageModels) {
		if u.Models == nil {
			u.Models = make(map[string]UsageTotals)
		}
		u.Models[r.Model] = u.Models[r.Model].Add(t)
	}
}

// Plus returns u with every count of v added.
func (u Usage) Plus(v Usage) Usage {
	out := Usage{UsageTotals: u.UsageTotals.Add(v.UsageTotals)}
	if len(u.Models)+len(v.Models) > 0 {
		out.Models = maps.Clone(u.Models)
		if out.Models == nil {
			out.Models = make(map[string]UsageTotals, len(v.Models))
		}
		for m, t := range v.Models {
			out.Models[m] = out.Models[m].Add(t)
		}
	}
	return out
}

// Clone returns a deep copy of u (nil for nil).
func (u *Usage) Clone() *Usage {
	if u == nil {
		return nil
	}
	c := *u
	c.Models = maps.Clone(u.Models)
	return &c
}
