package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// What a run's parent asks of it: a cancel that cascades, a stop of its
// tree for a budget (model.Row.fromParent decides which). The sweep reads
// each parent once (parent) and passes its row to model.Due.

// renotifyCancel publishes again, paced, the cancel event of a run whose
// cancel is recorded and whose worker still runs it (model.RenotifyCancel): the event a cancel's
// writer published may have been lost, and the row is the record.
func (s *sweep) renotifyCancel(ctx context.Context, row *model.Row) {
	if s.r.paceOK(row.ID+"/cancel", s.now, max(s.r.cfg.Interval, 5*time.Second)) {
		s.r.notifyCancel(ctx, row)
	}
}

// stopForTree stops a live run whose parent was stopped for its tree's
// budget (model.StopForTree; parent.Client.StopTree): it completes a stop
// that a crash cut short, or reaches a child dispatched while the stop
// went on.
func (s *sweep) stopForTree(ctx context.Context, row *model.Row, a model.StopForTree) error {
	changed := false
	now := time.Now()
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *model.Row) error {
		err := model.Apply(r, model.BudgetStopped{Overrun: a.Overrun, Held: s.r.holderAlive(ctx, r)}, now) // nil or model.ErrNoChange
		changed = err == nil
		return err
	})
	if err != nil || !changed {
		return err
	}
	s.r.announce(ctx, next)
	s.r.notifyCancel(ctx, next)
	s.count(func(st *Stats) { st.GivenUp++ })
	obs.Report(ctx, s.r.log, obs.BudgetExceeded, row.ID, "reason", events.ReasonBudgetExceeded, "owner", a.Overrun.Owner)
	return nil
}

// cascade cancels a live run whose parent was cancelled
// (model.CascadeCancel): it completes a cascade that a crash cut short.
func (s *sweep) cascade(ctx context.Context, row *model.Row, a model.CascadeCancel) error {
	reason := "parent run " + a.Parent + " was cancelled"
	aborted, changed := false, false
	now := time.Now()
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *model.Row) (err error) {
		err = model.Apply(r, model.CancelRequested{Reason: reason, Held: s.r.holderAlive(ctx, r)}, now)
		changed = err == nil
		aborted = changed && r.Status == events.StatusAborted
		return err
	})
	if err != nil || !changed {
		return err
	}
	if aborted {
		s.r.announce(ctx, next)
	} else {
		s.r.notifyCancel(ctx, next)
	}
	s.count(func(st *Stats) { st.Cancelled++ })
	obs.Report(ctx, s.r.log, obs.RunCascadeCancel, row.ID, "parent", a.Parent)
	return nil
}

// parent returns the row of parent id as this sweep first read it (nil if
// it is gone): the children of a fan-out share one read per sweep.
func (s *sweep) parent(ctx context.Context, id string) (*model.Row, error) {
	s.mu.Lock()
	p, ok := s.parents[id]
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	p, _, err := s.r.store.Get(ctx, id)
	if errors.Is(err, runstore.ErrRunNotFound) {
		p, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.parents[id] = p
	s.mu.Unlock()
	return p, nil
}
