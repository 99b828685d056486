package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
)

// A sweep comes every Interval, but a detached run's budgets may be shorter
// than that. A sweep that finds a run within its budgets notes when they
// would run out without a sign of progress (the run's budgetDue), if that
// comes before the next sweep, and the sweeper looks at those runs then, one
// read each: budgets are honoured within a tenth of theirs or budgetSlack,
// whichever is larger (model.Row.DueBudget), from the first sweep that sees the run (up to an
// Interval after it is dispatched). Only runs with such short budgets are
// noted, so the cost does not grow with the runs a sweep sees.

// budget executes what model.Row.DueBudget decided for row: it gives up
// a detached run past a budget, or notes when to look at it again.
func (s *sweep) budget(ctx context.Context, row *model.Row, a model.Action) error {
	switch a := a.(type) {
	case model.GiveUpByBudget:
		return s.giveUpByBudget(ctx, row, a)
	case model.WatchBudget:
		s.noteBudget(row.ID, a.At)
	}
	return nil
}

// giveUpByBudget gives up a detached run past its absolute budget, or
// silent for longer than its no-progress budget (model.GiveUpByBudget),
// unless it signalled meanwhile.
func (s *sweep) giveUpByBudget(ctx context.Context, row *model.Row, a model.GiveUpByBudget) error {
	var gaveUp bool
	now := time.Now()
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *model.Row) error {
		gaveUp = false
		if again, _ := r.OverBudget(now, s.r.policy); again == "" {
			return runstore.ErrNoChange // it signalled meanwhile, or ended
		}
		// Its child, if a live worker executes it, is torn down.
		if err := model.Apply(r, model.GaveUp{Reason: a.Reason, Error: a.Text, Held: s.r.holderAlive(ctx, r)}, now); err != nil {
			return err
		}
		gaveUp = true
		return nil
	})
	if err != nil || !gaveUp {
		return err
	}
	s.r.announce(ctx, next)
	s.r.notifyCancel(ctx, next)
	s.count(func(st *Stats) { st.GivenUp++ })
	obs.Report(ctx, s.r.log, obs.BudgetExceeded, row.ID, "reason", a.Reason, "child_still_running", next.ChildStillRunning)
	return nil
}

// noteBudget records that run id is to be looked at at due, when that comes
// before the next sweep.
func (s *sweep) noteBudget(id string, due time.Time) {
	if due.IsZero() || !due.Before(s.now.Add(s.r.cfg.Interval)) {
		return
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.r.budgetDue == nil {
		s.r.budgetDue = make(map[string]time.Time)
	}
	s.r.budgetDue[id] = due
}

// nextBudgetCheck returns how long until the first noted run is due.
func (r *Reconciler) nextBudgetCheck(now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, due := range r.budgetDue {
		if first.IsZero() || due.Before(first) {
			first = due
		}
	}
	return max(first.Sub(now), 0), !first.IsZero()
}

// checkBudgets enforces the budgets of the noted runs that are due (a run
// still within them is noted again).
func (r *Reconciler) checkBudgets(ctx context.Context) {
	now := time.Now()
	var ids []string
	r.mu.Lock()
	for id, due := range r.budgetDue {
		if !due.After(now) {
			ids = append(ids, id)
			delete(r.budgetDue, id)
		}
	}
	r.mu.Unlock()
	if !r.leader.Load() {
		return // the next leader's sweeps take them up
	}
	s := &sweep{r: r, now: now, parents: make(map[string]*model.Row)}
	for _, id := range ids {
		row, _, err := r.store.Get(ctx, id)
		if errors.Is(err, runstore.ErrRunNotFound) {
			continue
		}
		var a model.Action
		if err == nil {
			a = row.DueBudget(now, r.policy)
			err = s.budget(ctx, row, a)
		}
		if err != nil && ctx.Err() == nil {
			r.fault(ctx, "enforce run budgets", err, "run_id", id) // the next sweep looks again
		} else if err == nil && a != nil {
			r.TestSignals.Acted.Signal(Acted{RunID: id, Action: a, Between: true})
		}
	}
	r.mu.Lock()
	r.givenUpBetween += s.stats.GivenUp // counted with the next sweep's
	r.mu.Unlock()
	r.TestSignals.BudgetsChecked.Signal(len(ids))
}
