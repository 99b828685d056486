package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/jetrun/jetrun/internal/engine/budget"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/worker/internal/runhook"
)

// Reservations on a worker (Run.Reserve; model.Hold).
//
// A reservation is a hold on the row of every run whose budget the run
// draws from (model.Row.Budgets), each opened by one compare-and-set
// (model.Reserved) that refuses it when that budget has no room: the
// tree's totals and the other holds are on that row, so concurrent
// reservations from any worker are decided one at a time. A hold carries
// an expiry one lease ahead, moved on by the worker's heart while the
// attempt holds it open (renewHolds), so the holds of a worker killed -9
// stop counting within a lease.
//
// The run's next usage report settles every hold open when it is made:
// they go with its charges (model.Charged.Settles), which drop them in the
// write that adds the spend. Release drops one hold (model.HoldsReleased)
// unless a report took it; the attempt's end drops whatever of its holds
// is left (releaseHolds), after its last charges. A tree without a budget
// holds nothing: Reserve costs it no write, and a run that never reserves
// pays nothing for reservations.

// execHolds is an attempt's open holds; mu is a leaf lock.
type execHolds struct {
	mu      sync.Mutex
	seq     int
	open    map[string][]string // by hold id, the budget rows it is on
	any     bool                // the attempt reserved on some budget row
	renewAt time.Time           // when the open holds' expiry is moved on next
}

// Reserve is Run.Reserve on a worker, with a checked amount.
func (e *execution) Reserve(ctx context.Context, req runhook.ReserveRequest) (func(), error) {
	if e.ctl.isEnded() {
		return nil, ErrLeaseLost
	}
	if err := e.startUsage(ctx, e.row); err != nil {
		return nil, err
	}
	grant, err := e.reserveLimit(ctx, req) // waits for room on a provider limit (limits.go)
	if err != nil {
		return nil, err
	}
	e.use.mu.Lock()
	rows := e.use.budgets
	e.use.mu.Unlock()
	if len(rows) == 0 {
		return func() { e.releaseGrant(grant) }, nil
	}
	now := time.Now()
	h := model.Hold{Run: e.id, Attempt: e.attempt, Amount: model.TotalsOf(req.Usage), Until: now.Add(e.w.cfg.Lease)}
	e.holds.mu.Lock()
	e.holds.seq++
	h.ID = fmt.Sprintf("%s.%d.%d", e.id, e.attempt, e.holds.seq)
	if e.holds.open == nil {
		e.holds.open = make(map[string][]string)
	}
	if !e.holds.any {
		e.holds.any, e.holds.renewAt = true, now.Add(e.w.cfg.Lease/3)
	}
	e.holds.mu.Unlock()
	var held []string
	for _, id := range rows {
		err := e.hold(ctx, id, h, now)
		if errors.Is(err, runstore.ErrRunNotFound) {
			continue // cleared: no budget to hold against
		}
		if err != nil {
			e.dropHold(held, h.ID)
			e.releaseGrant(grant)
			var over *model.OverrunError
			if errors.As(err, &over) {
				return nil, fmt.Errorf("worker: reserve for run %s: %w: %s", e.id, ErrBudgetExceeded, over.Overrun)
			}
			return nil, fmt.Errorf("worker: reserve for run %s on the budget of run %s: %w", e.id, id, err)
		}
		held = append(held, id)
	}
	e.holds.mu.Lock()
	e.holds.open[h.ID] = held
	e.holds.mu.Unlock()
	e.wake() // the heart renews it (rest.go)
	return func() { e.releaseHold(h.ID); e.releaseGrant(grant) }, nil
}

// hold opens h on budget row id, sending it again through a transient
// fault (it is taken once: model.Reserved) while ctx lasts and the worker
// holds its runs, as a charge is: a fault is not a refusal.
func (e *execution) hold(ctx context.Context, id string, h model.Hold, now time.Time) error {
	var pause *backoff.ExponentialBackOff
	for {
		err := e.mutateBudget(ctx, id, model.Reserved{Hold: h}, now)
		if err == nil || ctx.Err() != nil || !jsfault.IsTransient(ctx, err) || !time.Now().Before(e.w.holdsUntil()) {
			return err
		}
		e.w.fault(ctx, e.log, "reserve on a run's budget; retrying", err, "budget_run", id)
		if pause == nil {
			pause = jsfault.NewBackOff(maxFaultPause)
		}
		if err := jsfault.Sleep(ctx, pause.NextBackOff()); err != nil {
			return err
		}
	}
}

// mutateBudget applies ev at now to the row of run id, a budget's owner:
// through the attempt's row writes when it is the run's own, else with the
// worker's other reservation writes to that row (holdbatch.go).
func (e *execution) mutateBudget(ctx context.Context, id string, ev model.Event, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	fn := func(r *model.Row) error { return model.Apply(r, ev, now) }
	if id == e.id {
		_, err := e.write(ctx, fn)
		return err
	}
	return e.w.holdWrites.apply(ctx, e.w.store, id, fn)
}

// chargeWriter returns how the attempt's charges write another run's row:
// once the attempt reserved, with its worker's reservation writes to that
// row (holdbatch.go), so runs of one tree on one worker that reserve do
// not race each other for the row; otherwise on their own, as before.
func (e *execution) chargeWriter() budget.Mutator {
	e.holds.mu.Lock()
	reserving := e.holds.any
	e.holds.mu.Unlock()
	if !reserving {
		return nil
	}
	return func(ctx context.Context, id string, fn func(*model.Row) error) error {
		return e.w.holdWrites.apply(ctx, e.w.store, id, fn)
	}
}

// releaseHold drops hold id from the rows it is on, unless a usage
// report took it already.
func (e *execution) releaseHold(id string) {
	e.holds.mu.Lock()
	rows, open := e.holds.open[id]
	delete(e.holds.open, id)
	e.holds.mu.Unlock()
	if open {
		e.dropHold(rows, id)
	}
}

// dropHold drops hold id from rows; a hold that could not be dropped
// expires (and the attempt's end drops it).
func (e *execution) dropHold(rows []string, id string) {
	ctx := context.Background()
	for _, row := range rows {
		err := e.mutateBudget(ctx, row, model.HoldsReleased{Run: e.id, Attempt: e.attempt, IDs: []string{id}}, time.Now())
		if err != nil && !errors.Is(err, runstore.ErrRunNotFound) && !errors.Is(err, ErrLeaseLost) {
			e.log.WarnContext(ctx, "release a reservation; it expires within a lease", "budget_run", row, "err", err)
		}
	}
}

// settleHolds hands the holds open now to the charges of the report being
// made: each goes with the attempt's next charge to every row it is on.
func (e *execution) settleHolds() {
	e.holds.mu.Lock()
	open := e.holds.open
	e.holds.open = nil
	e.holds.mu.Unlock()
	if len(open) == 0 {
		return
	}
	e.use.mu.Lock()
	defer e.use.mu.Unlock()
	if e.use.settle == nil {
		e.use.settle = make(map[string][]string)
	}
	for id, rows := range open {
		for _, row := range rows {
			e.use.settle[row] = append(e.use.settle[row], id)
		}
	}
}

// takeSettles returns, and forgets, the holds on row id the attempt's
// next charge there settles.
func (e *execution) takeSettles(id string) []string {
	e.use.mu.Lock()
	defer e.use.mu.Unlock()
	s := e.use.settle[id]
	delete(e.use.settle, id)
	return s
}

// settling reports whether the attempt's next charge to row id settles
// holds.
func (e *execution) settling(id string) bool {
	e.use.mu.Lock()
	defer e.use.mu.Unlock()
	return len(e.use.settle[id]) > 0
}

// renewDue reports whether the attempt holds open holds whose expiry is
// due to move on at now.
// anyOpen reports whether the attempt holds a reservation open.
func (h *execHolds) anyOpen() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.open) > 0
}

func (h *execHolds) renewDue(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.open) > 0 && !now.Before(h.renewAt)
}

// renewHolds moves the expiry of the attempt's open holds one lease on
// from now (the heart's, every third of a lease while any is open).
func (e *execution) renewHolds(ctx context.Context, now time.Time) {
	e.holds.mu.Lock()
	var rows []string
	for _, rs := range e.holds.open {
		for _, r := range rs {
			if !slices.Contains(rows, r) {
				rows = append(rows, r)
			}
		}
	}
	e.holds.renewAt = now.Add(e.w.cfg.Lease / 3)
	e.holds.mu.Unlock()
	for _, row := range rows {
		err := e.mutateBudget(ctx, row, model.HoldsRenewed{Run: e.id, Attempt: e.attempt, Until: now.Add(e.w.cfg.Lease)}, now)
		if err != nil && !errors.Is(err, runstore.ErrRunNotFound) && !errors.Is(err, ErrLeaseLost) {
			e.log.WarnContext(ctx, "renew the run's reservations; retried at the next beat", "budget_run", row, "err", err)
			e.holds.mu.Lock()
			e.holds.renewAt = now
			e.holds.mu.Unlock()
		}
	}
}

// releaseHolds drops every hold of the attempt still on a budget row (not
// settled nor released): the attempt ends, after its last charges.
func (e *execution) releaseHolds() {
	e.holds.mu.Lock()
	any := e.holds.any
	e.holds.open, e.holds.any = nil, false
	e.holds.mu.Unlock()
	if !any {
		return
	}
	e.use.mu.Lock()
	rows := e.use.budgets
	e.use.mu.Unlock()
	ctx := context.Background()
	for _, row := range rows {
		err := e.mutateBudget(ctx, row, model.HoldsReleased{Run: e.id, Attempt: e.attempt}, time.Now())
		if err != nil && !errors.Is(err, runstore.ErrRunNotFound) && !errors.Is(err, ErrLeaseLost) {
			e.log.WarnContext(ctx, "release the attempt's reservations; they expire within a lease", "budget_run", row, "err", err)
		}
	}
}
