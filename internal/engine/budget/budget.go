// Package budget is the home of budgets over a run tree
// (events.TreeBudget): charging a tree with a run's usage, and stopping a
// subtree past its budget.
//
// A nested run carries the id of the top of its tree (Root) and of every
// ancestor with a budget (BudgetFrom), filled in from its parent's row when
// it is dispatched (package parent). Its usage is added to those runs' rows
// (TreeUsage) by a compare-and-set per report (model.Charged: a
// charge retried after its answer was lost counts once): the
// report that takes a tree past its budget marks the budget's owner
// (Overrun) and stops its subtree (Stop). Concurrent reports are
// serialized by the compare-and-set, each adding all of itself, so a tree
// overshoots its budget by at most the reports in flight when it is
// crossed: one report per run that is still running, since a run whose
// report finds the tree stopped is told so (ErrExceeded) and its worker
// cancels it.
package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// ErrExceeded is the error of usage charged into a tree stopped for a
// budget, and of a nested run its tree's runs budget refuses (it is
// parent.ErrBudgetExceeded).
var ErrExceeded = jetruntype.ErrBudgetExceeded

// Trees charges and stops the run trees of a runtime.
type Trees struct {
	rt       *engine.Runtime
	maxDepth int // how deep Stop walks a subtree
	log      *slog.Logger
}

// New returns the Trees of rt; Stop walks at most maxDepth levels.
func New(rt *engine.Runtime, maxDepth int, log *slog.Logger) *Trees {
	return &Trees{rt: rt, maxDepth: maxDepth, log: log}
}

// Charge adds usage ev.Delta to the tree totals of run id (one of a run's
// model.Row.Charges) as the charge ev.Mark, settling the reservations
// ev.Settles, with a compare-and-set: once,
// however often it is sent (model.Charged), so a charge whose
// answer was lost may be sent again. A charge that takes a budget past its
// bound, or lands in a tree stopped for one, stops that budget's subtree
// (Stop) before Charge returns, and Charge returns an error wrapping
// ErrExceeded. A run that does not exist (cleared) takes nothing.
func (t *Trees) Charge(ctx context.Context, id string, ev model.Charged) error {
	return t.ChargeVia(ctx, id, ev, t.mutate)
}

// Mutator writes row id with fn, as runstore.Store.Mutate does.
type Mutator func(ctx context.Context, id string, fn func(*model.Row) error) error

func (t *Trees) mutate(ctx context.Context, id string, fn func(*model.Row) error) error {
	_, _, err := t.rt.Store().Mutate(ctx, id, fn)
	return err
}

// ChargeVia is Charge with the row written by mutate (a worker's writes
// to a budget row batched with its reservations); a nil mutate is Charge.
func (t *Trees) ChargeVia(ctx context.Context, id string, ev model.Charged, mutate Mutator) error {
	if mutate == nil {
		mutate = t.mutate
	}
	var crossed, was *jetruntype.Overrun
	now := time.Now()
	err := mutate(ctx, id, func(r *model.Row) error {
		was, crossed = r.Overrun, nil
		if err := model.Apply(r, ev, now); err != nil {
			return err // runstore.ErrNoChange: a charge taken already
		}
		if was == nil {
			crossed = r.Overrun // the charge took the tree past its budget
		}
		return nil
	})
	if errors.Is(err, runstore.ErrRunNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("budget: charge usage to run %s: %w", id, err)
	}
	// A charge into a tree stopped already stops it again (a no-op once
	// done): its run then ends only after every run above it was stopped,
	// never while the stop is still under way. A failed stop is the
	// reconciler's to complete; the charge landed.
	o := firstOverrun(crossed, was)
	if o == nil {
		return nil
	}
	if err := t.Stop(ctx, *o); err != nil {
		t.log.WarnContext(ctx, "stop a tree past its budget; the reconciler completes it", "run_id", o.Owner, "err", err)
	}
	return fmt.Errorf("budget: %w: %s", ErrExceeded, o)
}

// firstOverrun returns the first of os that is not nil.
func firstOverrun(os ...*jetruntype.Overrun) *jetruntype.Overrun {
	for _, o := range os {
		if o != nil {
			return o
		}
	}
	return nil
}

// Stop stops the subtree of the run that carries the budget o names:
// it and every live descendant end interrupted, reason budget-exceeded,
// the overrun on their rows; a run a live worker executes is told to stop
// (its row keeps childStillRunning until it has). It is idempotent; the
// reconciler completes a stop a crash cut short (a live run under a parent
// stopped for a budget is stopped too).
func (t *Trees) Stop(ctx context.Context, o jetruntype.Overrun) error {
	if err := t.stopOne(ctx, o.Owner, o); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
		return fmt.Errorf("budget: stop the tree of run %s: %w", o.Owner, err)
	}
	level := []string{o.Owner}
	for depth := 0; depth < t.maxDepth && len(level) > 0; depth++ {
		var next []string
		for _, p := range level {
			children, err := t.rt.Store().Index().Children(ctx, p)
			if err != nil {
				t.log.WarnContext(ctx, "list children to stop", "run_id", p, "err", err)
				continue
			}
			for _, ch := range children {
				if err := t.stopOne(ctx, ch.ID, o); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
					t.log.WarnContext(ctx, "stop child run for its tree's budget", "run_id", ch.ID, "err", err)
				}
				next = append(next, ch.ID)
			}
		}
		level = next
	}
	return nil
}

func (t *Trees) stopOne(ctx context.Context, id string, o jetruntype.Overrun) error {
	changed := false
	now := time.Now()
	row, _, err := t.rt.Store().Mutate(ctx, id, func(r *model.Row) error {
		held, err := t.rt.Store().Workers().HolderAlive(ctx, r)
		if err != nil {
			return err
		}
		err = model.Apply(r, model.BudgetStopped{Overrun: o, Held: held}, now)
		changed = err == nil
		return err
	})
	if err != nil || !changed {
		return err
	}
	row, err = t.rt.CountLostSteps(ctx, row) // stopped with no worker: its lost attempt's steps
	if err != nil {
		t.log.WarnContext(ctx, "count the stored steps of a run stopped for its tree's budget", "run_id", row.ID, "err", err)
	}
	if err := t.rt.Announce(ctx, row, ""); err != nil {
		t.log.WarnContext(ctx, "announce a run stopped for its tree's budget", "run_id", row.ID, "err", err)
	}
	if row.CancelRequested && row.Worker != "" {
		return wire.PublishCancelEvent(ctx, t.rt.JetStream(), t.rt.Namespace(), row.CancelEvent(time.Now()))
	}
	return nil
}
