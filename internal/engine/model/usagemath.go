package model

import (
	"maps"

	"github.com/jetrun/jetrun/pkg/events"
)

// Usage arithmetic: the engine adds reports to a run's usage and charges
// the difference to its tree.

// EmptyReport reports whether u adds nothing.
func EmptyReport(u events.UsageReport) bool {
	return u.InputTokens == 0 && u.OutputTokens == 0 && u.CostMicros == 0
}

// SubTotals returns u minus v.
func SubTotals(u, v events.UsageTotals) events.UsageTotals {
	return events.UsageTotals{InputTokens: u.InputTokens - v.InputTokens, OutputTokens: u.OutputTokens - v.OutputTokens, CostMicros: u.CostMicros - v.CostMicros}
}

// IsZeroTotals reports whether u counts nothing.
func IsZeroTotals(u events.UsageTotals) bool { return u == events.UsageTotals{} }

// TotalsOf returns the totals of one report.
func TotalsOf(r events.UsageReport) events.UsageTotals {
	return events.UsageTotals{InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, CostMicros: r.CostMicros}
}

// AddReport adds one report to u (per model for the first MaxUsageModels models).
func AddReport(u *events.Usage, r events.UsageReport) {
	t := TotalsOf(r)
	u.UsageTotals = u.UsageTotals.Add(t)
	if _, known := u.Models[r.Model]; r.Model != "" && (known || len(u.Models) < events.MaxUsageModels) {
		if u.Models == nil {
			u.Models = make(map[string]events.UsageTotals)
		}
		u.Models[r.Model] = u.Models[r.Model].Add(t)
	}
}

// PlusUsage returns u with every count of v added.
func PlusUsage(u, v events.Usage) events.Usage {
	out := events.Usage{UsageTotals: u.UsageTotals.Add(v.UsageTotals)}
	if len(u.Models)+len(v.Models) > 0 {
		out.Models = maps.Clone(u.Models)
		if out.Models == nil {
			out.Models = make(map[string]events.UsageTotals, len(v.Models))
		}
		for m, t := range v.Models {
			out.Models[m] = out.Models[m].Add(t)
		}
	}
	return out
}

// CloneUsage returns a deep copy of u (nil for nil).
func CloneUsage(u *events.Usage) *events.Usage {
	if u == nil {
		return nil
	}
	c := *u
	c.Models = maps.Clone(u.Models)
	return &c
}

// MinusUsage returns u less v, count by count and model by model, never
// below zero: what u counts that v does not.
func MinusUsage(u, v events.Usage) events.Usage {
	out := events.Usage{UsageTotals: clampTotals(SubTotals(u.UsageTotals, v.UsageTotals))}
	for m, t := range u.Models {
		if d := clampTotals(SubTotals(t, v.Models[m])); !IsZeroTotals(d) {
			if out.Models == nil {
				out.Models = make(map[string]events.UsageTotals, len(u.Models))
			}
			out.Models[m] = d
		}
	}
	return out
}

// IsZeroUsage reports whether u counts nothing, in its totals or on any
// model.
func IsZeroUsage(u events.Usage) bool {
	if !IsZeroTotals(u.UsageTotals) {
		return false
	}
	for _, t := range u.Models {
		if !IsZeroTotals(t) {
			return false
		}
	}
	return true
}

func clampTotals(t events.UsageTotals) events.UsageTotals {
	return events.UsageTotals{InputTokens: max(t.InputTokens, 0), OutputTokens: max(t.OutputTokens, 0), CostMicros: max(t.CostMicros, 0)}
}
