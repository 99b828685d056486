package parent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Budgets over a run tree (events.TreeBudget) are charged and enforced by
// the engine (package budget); a dispatch fills in a nested run's tree and
// counts it against its tree's runs budgets here.

// ErrBudgetExceeded is returned by Dispatch and Run for a nested run a
// runs budget of its tree does not allow, or whose tree was stopped for a
// budget already; a worker's run whose usage lands in a stopped tree is
// cancelled with it.
var ErrBudgetExceeded = jetruntype.ErrBudgetExceeded

// fillTree sets the tree fields of d, a nested run's dispatch, from its
// parent's row (read unless given), and counts it against every runs
// budget it draws from: over one, it is refused with ErrBudgetExceeded and
// nothing is counted or created.
func (c *Client) fillTree(ctx context.Context, d *events.Dispatch, parentRow *model.Row) error {
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
	d.Root, d.BudgetFrom = parentRow.ChildTree()
	if len(d.BudgetFrom) == 0 {
		return nil
	}
	if _, _, err := c.lookup(ctx, d.RunID); err == nil {
		return nil // a re-dispatch: counted when it was created
	}
	now := time.Now()
	for _, id := range d.BudgetFrom {
		var over *jetruntype.Overrun
		_, _, err := c.store.Mutate(ctx, id, func(r *model.Row) error {
			if over = r.Overrun; over != nil {
				return runstore.ErrNoChange
			}
			var full *model.OverrunError
			if err := model.Apply(r, model.RunCounted{}, now); errors.As(err, &full) {
				over = &full.Overrun // no room for the run
				return runstore.ErrNoChange
			} else if err != nil {
				return err
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
