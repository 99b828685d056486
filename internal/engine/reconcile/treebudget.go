package reconcile

import (
	"context"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// stoppedTree stops a live run whose parent was stopped for its tree's
// budget (parent.Client.StopTree): it completes a stop that a crash cut
// short, or reaches a child dispatched while the stop went on. It comes
// before the cancel cascade, which would otherwise abort such a child (a
// run stopped for a budget has its cancel requested).
func (s *sweep) stoppedTree(ctx context.Context, row *jetruntype.Run) (bool, error) {
	if row.Parent == "" || row.Status == events.StatusInterrupted {
		return false, nil
	}
	p, err := s.parent(ctx, row.Parent)
	if p == nil || err != nil {
		return false, err
	}
	if p.Overrun == nil || p.Status != events.StatusInterrupted || p.Reason != events.ReasonBudgetExceeded {
		return false, nil
	}
	o := *p.Overrun
	changed := false
	now := time.Now()
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *jetruntype.Run) error {
		err := model.Apply(model.Of(r), model.BudgetStopped{Overrun: o, Held: s.r.holderAlive(ctx, r)}, now) // nil or model.ErrNoChange
		changed = err == nil
		return err
	})
	if err != nil || !changed {
		return true, err
	}
	s.r.announce(ctx, next)
	s.r.notifyCancel(ctx, next)
	s.count(func(st *Stats) { st.GivenUp++ })
	obs.Report(ctx, s.r.log, obs.BudgetExceeded, row.ID, "reason", events.ReasonBudgetExceeded, "owner", o.Owner)
	return true, nil
}
