package events

import (
	"errors"
	"fmt"
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
	// AnsweredAtMs is when the provider answered the model call the
	// report is for (Unix ms; 0: not said). A provider limit settles its
	// grant with it: a call granted at a window's very end and answered
	// before the roll was counted by the provider in that window, however
	// late the report reaches the worker.
	AnsweredAtMs int64 `json:"answeredAtMs,omitempty"`
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
	if u.AnsweredAtMs < 0 {
		errs = append(errs, errors.New("usage answeredAtMs must not be negative"))
	}
	if len(u.Model) > MaxModelNameLength {
		errs = append(errs, fmt.Errorf("usage model name is %d bytes; the limit is %d", len(u.Model), MaxModelNameLength))
	}
	return errors.Join(errs...)
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

// Usage is a run's own usage: its totals across attempts, and per model
// (reports without a model count only in the totals).
type Usage struct {
	UsageTotals
	Models map[string]UsageTotals `json:"models,omitempty"`
}
