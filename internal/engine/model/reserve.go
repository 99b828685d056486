package model

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Reservations (worker.Run.Reserve): spend a run holds against a budget
// before it is paid, on the row that carries the budget, next to its tree
// totals, so one compare-and-set decides whether it fits. A hold counts
// against the budget as if spent until the report that settles it (the real
// spend, Charged with Settles, replaces it in the same write), until its
// attempt releases it (HoldsReleased), or until it expires (Until): an
// attempt renews its holds while it runs (HoldsRenewed), so a crashed
// worker's holds stop counting within a lease.

// Hold is one open reservation on a budget row (the read type's).
type Hold = jetruntype.Hold

// MaxHolds bounds the open holds on one row: a reservation past it is
// refused (ErrTooManyHolds), so a row stays small.
const MaxHolds = 1024

// ErrTooManyHolds is the error of Reserved on a row with MaxHolds live
// holds.
var ErrTooManyHolds = errors.New("too many open reservations on the budget")

// Reserved opens Hold on the row, if the row's budget has room for it:
// its tree totals plus its live holds plus Hold.Amount within every bound
// of the budget. Otherwise (or once the tree is stopped for a budget) it
// changes nothing and returns an *OverrunError saying what the hold would
// take the tree to. A hold the row has already (a retry whose answer was
// lost) is ErrNoChange. Holds expired at now, and those of the run's
// earlier attempts, are dropped.
type Reserved struct{ Hold Hold }

func (ev Reserved) apply(r *Row, now time.Time) error {
	if slices.ContainsFunc(r.Holds, func(h Hold) bool { return h.ID == ev.Hold.ID }) {
		return ErrNoChange
	}
	if r.Overrun != nil {
		return &OverrunError{Overrun: *r.Overrun}
	}
	live := r.liveHolds(now, ev.Hold.Run, ev.Hold.Attempt)
	if len(live) >= MaxHolds {
		return fmt.Errorf("model: reserve on run %s: %w (%d)", r.ID, ErrTooManyHolds, MaxHolds)
	}
	if o := r.holdOverrun(live, ev.Hold.Amount); o != nil {
		return &OverrunError{Overrun: *o}
	}
	r.Holds = append(live, ev.Hold)
	return nil
}

// HoldsReleased drops the holds of attempt Attempt of run Run named by IDs
// (every one of that attempt when IDs is empty), and holds expired at now.
// It is ErrNoChange when nothing is dropped.
type HoldsReleased struct {
	Run     string
	Attempt int
	IDs     []string
}

func (ev HoldsReleased) apply(r *Row, now time.Time) error {
	kept := slices.DeleteFunc(slices.Clone(r.Holds), func(h Hold) bool {
		if !h.Until.After(now) {
			return true
		}
		return h.Run == ev.Run && h.Attempt == ev.Attempt && (len(ev.IDs) == 0 || slices.Contains(ev.IDs, h.ID))
	})
	if len(kept) == len(r.Holds) {
		return ErrNoChange
	}
	r.Holds = nilIfEmpty(kept)
	return nil
}

// HoldsRenewed moves the Until of every live hold of attempt Attempt of
// run Run on to Until (never back). It is ErrNoChange when none moves.
type HoldsRenewed struct {
	Run     string
	Attempt int
	Until   time.Time
}

func (ev HoldsRenewed) apply(r *Row, now time.Time) error {
	changed := false
	holds := slices.Clone(r.Holds)
	for i, h := range holds {
		if h.Run == ev.Run && h.Attempt == ev.Attempt && h.Until.After(now) && ev.Until.After(h.Until) {
			holds[i].Until, changed = ev.Until, true
		}
	}
	if !changed {
		return ErrNoChange
	}
	r.Holds = holds
	return nil
}

// liveHolds returns r's holds that count at now, without those of run's
// attempts before attempt (a run is taken over only once its earlier
// attempt stopped).
func (r *Row) liveHolds(now time.Time, run string, attempt int) []Hold {
	out := make([]Hold, 0, len(r.Holds)+1)
	for _, h := range r.Holds {
		if h.Until.After(now) && (h.Run != run || h.Attempt >= attempt) {
			out = append(out, h)
		}
	}
	return out
}

// HeldTotals returns what r's holds live at now hold, added up.
func (r *Row) HeldTotals(now time.Time) jetruntype.UsageTotals {
	var t jetruntype.UsageTotals
	for _, h := range r.Holds {
		if h.Until.After(now) {
			t = t.Add(h.Amount)
		}
	}
	return t
}

// holdOverrun returns the first bound of r's budget that its tree totals,
// the holds live and amount would exceed together.
func (r *Row) holdOverrun(live []Hold, amount jetruntype.UsageTotals) *jetruntype.Overrun {
	b := r.Budget
	if b == nil {
		return nil
	}
	var tot jetruntype.UsageTotals
	if r.TreeUsage != nil {
		tot = *r.TreeUsage
	}
	for _, h := range live {
		tot = tot.Add(h.Amount)
	}
	tot = tot.Add(amount)
	switch {
	case b.Tokens > 0 && amount.Tokens() > 0 && tot.Tokens() > b.Tokens:
		return &jetruntype.Overrun{Owner: r.ID, Budget: "tokens", Limit: b.Tokens, Used: tot.Tokens()}
	case b.CostMicros > 0 && amount.CostMicros > 0 && tot.CostMicros > b.CostMicros:
		return &jetruntype.Overrun{Owner: r.ID, Budget: "costMicros", Limit: b.CostMicros, Used: tot.CostMicros}
	}
	return nil
}

// settle drops the holds named by ids: the charge that carries them
// replaces what they held with what was spent.
func (r *Row) settle(ids []string) {
	if len(ids) == 0 || len(r.Holds) == 0 {
		return
	}
	r.Holds = nilIfEmpty(slices.DeleteFunc(slices.Clone(r.Holds), func(h Hold) bool { return slices.Contains(ids, h.ID) }))
}

func nilIfEmpty(hs []Hold) []Hold {
	if len(hs) == 0 {
		return nil
	}
	return hs
}

// Budgets lists the runs whose budgets r's usage counts against: every
// ancestor that carries one, and r itself when it does. A reservation of
// r's holds on each of them.
func (r *Row) Budgets() []string {
	out := slices.Clone(r.BudgetFrom)
	if r.Budget != nil && !slices.Contains(out, r.ID) {
		out = append(out, r.ID)
	}
	return out
}
