package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A step's usage (see "Steps" in usage.go): reported with the step's
// context, charged to the run's tree before the step is stored, counted on
// the run once the step is stored (foldStep), or made the attempt's when
// the step is not stored (freeStep).

// stepUsage adds up the usage reported with one step's context (Run.Usage
// finds it there): the step's own spending, stored with it. charging is
// held while the step's usage is charged to the run's tree (and comes
// before the execution's usage locks); mu guards the rest.
type stepUsage struct {
	charging sync.Mutex

	mu      sync.Mutex
	u       events.Usage
	n       int
	charged map[string]jetruntype.UsageTotals // per run charged, the step's totals it has
	handed  bool                              // folded into the run's usage or made the attempt's

	reserved []*Reservation // made with the step's context: released when it ends (reserve.go)
}

// reserve records a reservation made with the step's context.
func (s *stepUsage) reserve(r *Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved = append(s.reserved, r)
}

// releaseReservations releases the reservations made with the step's
// context that no report settled.
func (s *stepUsage) releaseReservations() {
	s.mu.Lock()
	rs := s.reserved
	s.reserved = nil
	s.mu.Unlock()
	for _, r := range rs {
		r.Release()
	}
}

type stepUsageKey struct{}

func (s *stepUsage) add(u Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	model.AddReport(&s.u, u)
	s.n++
}

// total is the step's usage, nil when it reported none.
func (s *stepUsage) total() *events.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return nil
	}
	u := s.u
	u.Models = maps.Clone(s.u.Models)
	return &u
}

// handOver hands the step's usage and its charges over, once: ok is false
// when they were handed over already or there are none.
func (s *stepUsage) handOver() (u events.Usage, charged map[string]jetruntype.UsageTotals, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handed || s.n == 0 {
		return events.Usage{}, nil, false
	}
	s.handed = true
	return s.u, s.charged, true
}

// stepBook is what a backend that counts a step's usage with the step
// does (the worker's execution; workertest records steps only).
type stepBook interface {
	// storeStepWith stores st, whose usage spent holds, as StoreStep does.
	storeStepWith(ctx context.Context, st events.Step, spent *stepUsage) error
	// freeStep makes the usage of a step that is not stored the attempt's.
	freeStep(spent *stepUsage)
}

// storeStepWith stores st (StoreStep). A step with usage is charged to
// the run's tree first (a step that cannot be charged is not stored), and
// its usage joins the run's once the server has stored it, however long
// after this returns that is (an answer awaited past the end of ctx).
func (e *execution) storeStepWith(ctx context.Context, st events.Step, spent *stepUsage) error {
	if err := e.claimLate(ctx); err != nil {
		return err
	}
	var stored func(dup bool)
	if st.Usage != nil && spent != nil {
		if err := e.startUsage(ctx, e.row); err != nil {
			e.freeStep(spent)
			return err
		}
		if err := e.chargeStep(ctx, spent); err != nil {
			e.freeStep(spent)
			return fmt.Errorf("worker: step %s of run %s: %w", st.Name, e.id, err)
		}
		stored = func(dup bool) { e.foldStep(st.Name, spent, dup) }
	}
	queued, err := e.pub.publishTracked(ctx, events.KindStep, wire.StepMsgID(e.id, st.Name), st, stored)
	if err != nil {
		if !queued && spent != nil {
			e.freeStep(spent)
		}
		return err
	}
	e.noteSignal(st.At, nil)
	return nil
}

// chargeStep adds what step s spent and was not charged yet to the tree
// totals of the runs the attempt's usage is charged to, as chargeTree does
// for the attempt's (chargeRun, patient: through faults), except the run's
// own when it is the top of a tree without a budget (selfTree: syncedUsage
// adds the step's usage there once it is stored).
func (e *execution) chargeStep(ctx context.Context, s *stepUsage) error {
	s.charging.Lock()
	defer s.charging.Unlock()
	u := s.total()
	if u == nil {
		return nil
	}
	total := u.UsageTotals
	e.use.mu.Lock()
	charges, selfTree := e.use.charges, e.use.selfTree
	e.use.mu.Unlock()
	e.use.chargeMu.Lock() // one charge of the attempt at a time, in sequence
	defer e.use.chargeMu.Unlock()
	var (
		errs []error
		over error
	)
	for _, id := range charges {
		if id == e.id && selfTree {
			continue
		}
		s.mu.Lock()
		d := model.SubTotals(total, s.charged[id])
		s.mu.Unlock()
		if model.IsZeroTotals(d) && !e.settling(id) {
			continue
		}
		taken, err := e.chargeRun(ctx, id, d, true)
		if taken {
			s.mu.Lock()
			if s.charged == nil {
				s.charged = make(map[string]jetruntype.UsageTotals, len(charges))
			}
			s.charged[id] = total
			s.mu.Unlock()
		}
		switch {
		case errors.Is(err, parent.ErrBudgetExceeded):
			over = err
		case err != nil:
			errs = append(errs, err)
		}
	}
	if over != nil {
		e.ctl.cancelWith(over)
		return over
	}
	return errors.Join(errs...)
}

// foldStep counts the usage of step name, just stored, on the run: the
// next row write shows it, with stepUsage moved on. It is called as the
// server acknowledges the step's event; an acknowledgement of a copy of a
// step the attempt counted already (a second call of the same name) makes
// the second call's usage the attempt's.
func (e *execution) foldStep(name string, s *stepUsage, dup bool) {
	e.use.mu.Lock()
	counted := e.use.foldedBy[name]
	e.use.mu.Unlock()
	if dup && counted {
		e.freeStep(s)
		return
	}
	u, _, ok := s.handOver()
	if !ok {
		return
	}
	e.use.mu.Lock()
	e.use.folded = model.PlusUsage(e.use.folded, u)
	if e.use.foldedBy == nil {
		e.use.foldedBy = make(map[string]bool)
	}
	e.use.foldedBy[name] = true
	e.use.mu.Unlock()
	e.rw.markDirty()
}

// freeStep makes the usage of a step that is not stored the attempt's,
// with the tree charges it had: the next row sync counts it (and charges
// what is left to charge), as a report outside any step.
func (e *execution) freeStep(s *stepUsage) {
	s.charging.Lock()
	defer s.charging.Unlock()
	u, charged, ok := s.handOver()
	if !ok {
		return
	}
	e.use.chargeMu.Lock()
	e.use.mu.Lock()
	e.use.attempt = model.PlusUsage(e.use.attempt, u)
	for id, t := range charged {
		if e.use.charged == nil {
			e.use.charged = make(map[string]jetruntype.UsageTotals, len(charged))
		}
		e.use.charged[id] = e.use.charged[id].Add(t)
	}
	e.use.mu.Unlock()
	e.use.chargeMu.Unlock()
	e.rw.markDirty()
}

// startSteps counts, at a takeover, the usage of the steps earlier
// attempts stored that the row does not count (their attempt died before
// its row write): it is added to the run's usage (and, on the top of a tree
// without a budget, to its tree totals) by the attempt's next row write,
// which moves stepUsage on with it. Their tree totals elsewhere were
// charged before the steps were stored.
func (e *execution) startSteps(ctx context.Context, claimed *model.Row, stored []events.Step) error {
	var spent jetruntype.Usage
	for _, st := range stored {
		if st.Usage != nil {
			spent = model.PlusUsage(spent, *st.Usage)
		}
	}
	var had jetruntype.Usage
	if claimed.StepUsage != nil {
		had = *claimed.StepUsage
	}
	missing := model.MinusUsage(spent, had)
	if model.IsZeroUsage(missing) {
		return nil
	}
	if err := e.startUsage(ctx, claimed); err != nil {
		return err
	}
	e.use.mu.Lock()
	e.use.recovered = missing
	e.use.mu.Unlock()
	e.rw.markDirty()
	e.log.InfoContext(ctx, "counting the usage of steps an earlier attempt stored", "tokens", missing.Tokens(), "cost_micros", missing.CostMicros)
	return nil
}
