package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// A sweep comes every Interval, but a detached run's budgets may be shorter
// than that. A sweep that finds a run within its budgets notes when they
// would run out without a sign of progress (the run's budgetDue), if that
// comes before the next sweep, and the sweeper looks at those runs then, one
// read each: budgets are honoured within a tenth of theirs or budgetSlack,
// whichever is larger, from the first sweep that sees the run (up to an
// Interval after it is dispatched). Only runs with such short budgets are
// noted, so the cost does not grow with the runs a sweep sees.

// budgetSlack is the least overrun of a budget the reconciler allows.
const budgetSlack = 100 * time.Millisecond

// budgetDue returns when r, within its budgets at now, should be looked at
// again: when one of them would run out with no sign of progress, or, while
// its no-progress budget is not armed or does not run (no signal yet,
// waiting for one), a tenth of that budget (budgetSlack at least) from now,
// to see it start. Zero when no budget applies.
func (s *sweep) budgetDue(r *jetruntype.Run, now time.Time) time.Time {
	cfg := s.r.cfg
	var due time.Time
	sooner := func(t time.Time) {
		if due.IsZero() || t.Before(due) {
			due = t
		}
	}
	if budget, on := wire.Budget(r.Detached.MaxBudgetMs, cfg.MaxBudget); on {
		sooner(model.Of(r).BudgetSince().Add(budget))
	}
	if silence, on := wire.Budget(r.Detached.NoProgressBudgetMs, cfg.NoProgressBudget); on {
		if since, runs := model.Of(r).NoProgressSince(); runs {
			sooner(since.Add(silence))
		} else {
			sooner(now.Add(max(silence/10, budgetSlack)))
		}
	}
	if due.IsZero() {
		return due
	}
	return due.Add(time.Millisecond) // a budget is over once exceeded
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
	s := &sweep{r: r, now: now, parents: make(map[string]*jetruntype.Run)}
	for _, id := range ids {
		row, _, err := r.store.Get(ctx, id)
		if errors.Is(err, runstore.ErrRunNotFound) {
			continue
		}
		if err == nil {
			_, err = s.enforceBudgets(ctx, row)
		}
		if err != nil && ctx.Err() == nil {
			r.fault(ctx, "enforce run budgets", err, "run_id", id) // the next sweep looks again
		}
	}
	r.mu.Lock()
	r.givenUpBetween += s.stats.GivenUp // counted with the next sweep's
	r.mu.Unlock()
}
