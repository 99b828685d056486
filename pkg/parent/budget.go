package parent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Budgets over a run tree (events.TreeBudget).
//
// A nested run carries the id of the top of its tree (Root) and of every
// ancestor with a budget (BudgetFrom), filled in here from its parent's row
// when it is dispatched. Its usage is added to those runs' rows
// (TreeUsage) by a compare-and-set per report (jetruntype.Run.Charge):
// the report that takes a tree past its budget marks the budget's owner
// (Overrun) and stops its subtree (StopTree). Concurrent reports are
// serialized by the compare-and-set, each adding all of itself, so a tree
// overshoots its budget by at most the reports in flight when it is
// crossed: one report per run that is still running, since a run whose
// report finds the tree stopped is told so (ErrBudgetExceeded) and its
// worker cancels it.

// ErrBudgetExceeded is returned by Dispatch and Run for a nested run a
// runs budget of its tree does not allow, or whose tree was stopped for a
// budget already, and by Charge for usage reported into a stopped tree.
var ErrBudgetExceeded = errors.New("budget exceeded")

// fillTree sets the tree fields of d, a nested run's dispatch, from its
// parent's row (read unless given), and counts it against every runs
// budget it draws from: over one, it is refused with ErrBudgetExceeded and
// nothing is counted or created.
func (c *Client) fillTree(ctx context.Context, d *events.Dispatch, parentRow *jetruntype.Run) error {
	if d.Parent == "" {
		return nil
	}
	if parentRow == nil || parentRow.ID != d.Parent {
		p, _, err := c.get(ctx, d.Parent)
		switch {
		case errors.Is(err, runstore.ErrRunNotFound):
			return nil // a parent jetrun does not know: no tree to draw from
		case err != nil:
			return fmt.Errorf("parent: dispatch run %s: read its parent: %w", d.RunID, err)
		}
		parentRow = p
	}
	d.Root, d.BudgetFrom = model.Of(parentRow).ChildTree()
	if len(d.BudgetFrom) == 0 {
		return nil
	}
	if _, _, err := c.lookup(ctx, d.RunID); err == nil {
		return nil // a re-dispatch: counted when it was created
	}
	for _, id := range d.BudgetFrom {
		var over *jetruntype.Overrun
		_, _, err := c.store.Mutate(ctx, id, func(r *jetruntype.Run) error {
			if r.Overrun != nil {
				over = r.Overrun
				return runstore.ErrNoChange
			}
			if over = model.Of(r).ChargeRun(); over != nil {
				return runstore.ErrNoChange
			}
			return nil
		})
		if err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
			return fmt.Errorf("parent: dispatch run %s: count it against the budget of %s: %w", d.RunID, id, err)
		}
		if over != nil {
			return fmt.Errorf("parent: dispatch run %s: %w: %s", d.RunID, ErrBudgetExceeded, over)
		}
	}
	return nil
}

// Charge adds usage d to the tree totals of the runs ids (a run's
// jetruntype.Run.Charges), one compare-and-set each. A charge that takes a
// budget past its bound, or lands in a tree stopped for one, stops that
// budget's subtree (StopTree) before Charge returns. It returns an error wrapping ErrBudgetExceeded when any
// of the runs' trees is stopped for a budget (by this charge or before).
func (c *Client) Charge(ctx context.Context, ids []string, d jetruntype.UsageTotals) error {
	var stopped *jetruntype.Overrun
	for _, id := range ids {
		var crossed, was *jetruntype.Overrun
		_, _, err := c.store.Mutate(ctx, id, func(r *jetruntype.Run) error {
			was = r.Overrun
			crossed = model.Of(r).Charge(d)
			return nil
		})
		if errors.Is(err, runstore.ErrRunNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("parent: charge usage to run %s: %w", id, err)
		}
		// A charge into a tree stopped already stops it again (a no-op
		// once done): its run then ends only after every run above it was
		// stopped, never while the stop is still under way.
		// A failed stop is the reconciler's to complete; the charge landed
		// and must not be repeated.
		if o := firstOverrun(crossed, was); o != nil {
			if err := c.StopTree(ctx, *o); err != nil {
				c.log.WarnContext(ctx, "stop a tree past its budget; the reconciler completes it", "run_id", o.Owner, "err", err)
			}
		}
		stopped = firstOverrun(stopped, crossed, was)
	}
	if stopped != nil {
		return fmt.Errorf("parent: %w: %s", ErrBudgetExceeded, stopped)
	}
	return nil
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

// StopTree stops the subtree of the run that carries the budget o names:
// it and every live descendant end interrupted, reason budget-exceeded,
// the overrun on their rows; a run a live worker executes is told to stop
// (its row keeps childStillRunning until it has). It is idempotent; the
// reconciler completes a stop a crash cut short (a live run under a parent
// stopped for a budget is stopped too).
func (c *Client) StopTree(ctx context.Context, o jetruntype.Overrun) error {
	if err := c.stopOne(ctx, o.Owner, o); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
		return fmt.Errorf("parent: stop the tree of run %s: %w", o.Owner, err)
	}
	level := []string{o.Owner}
	for depth := 0; depth < c.cfg.MaxDepth && len(level) > 0; depth++ {
		var next []string
		for _, p := range level {
			children, err := c.store.Children(ctx, p)
			if err != nil {
				c.log.WarnContext(ctx, "list children to stop", "run_id", p, "err", err)
				continue
			}
			for _, ch := range children {
				if err := c.stopOne(ctx, ch.ID, o); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
					c.log.WarnContext(ctx, "stop child run for its tree's budget", "run_id", ch.ID, "err", err)
				}
				next = append(next, ch.ID)
			}
		}
		level = next
	}
	return nil
}

func (c *Client) stopOne(ctx context.Context, id string, o jetruntype.Overrun) error {
	changed := false
	row, _, err := c.store.Mutate(ctx, id, func(r *jetruntype.Run) error {
		held, err := c.store.HolderAlive(ctx, r)
		if err != nil {
			return err
		}
		err = model.Of(r).StopForBudget(o, held, time.Now())
		changed = err == nil
		return err
	})
	if err != nil || !changed {
		return err
	}
	c.announce(ctx, row)
	if row.CancelRequested && row.Worker != "" {
		return wire.PublishCancel(ctx, c.js, c.ns, row.ID, row.CancelReason)
	}
	return nil
}
