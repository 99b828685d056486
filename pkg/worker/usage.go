package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Usage is one report of what a handler spent (Run.Usage): tokens and cost
// in millionths of a currency unit, optionally on a named model.
type Usage = events.UsageReport

// ErrBudgetExceeded is returned by Run.Usage once the run's tree is
// stopped for a budget (parent.ErrBudgetExceeded). A handler that returns
// it ends its run interrupted, reason budget-exceeded.
var ErrBudgetExceeded = parent.ErrBudgetExceeded

// Usage and the row.
//
// A report adds to the attempt's totals in memory; the row's usage is the
// usage it had when the attempt started plus the attempt's, written by the
// next row sync (every RowSyncInterval while the run reports) and by the
// attempt's final write, like progress: no round trip per report. A
// takeover starts from the row's usage, so what a kill -9 loses is the
// reports of the attempt's last RowSyncInterval made outside any step (the
// work behind them is usually done again by the next attempt, and
// reported again).
//
// Steps. A report made with a step's context (Run.Step) is the step's: it
// is stored with the step (events.Step.Usage) and joins the run's usage
// with it, once the step is stored, never before. The row's stepUsage says
// how much of its usage came with stored steps; an attempt that takes the
// run over adds what the run's stored steps spent beyond it (startSteps),
// in the same row write that moves stepUsage on. A run that ends or is
// given up without another attempt after its attempt was lost (a cancel,
// a stop for a budget, a give-up by the reconciler, the attempts used up)
// has that done by whoever ends it (engine.Runtime.CountLostSteps), and
// by the lost attempt itself if its process lives on (abandon). So a
// stored step's usage counts once on the run whatever dies when, and a
// step that was not stored (its worker died inside it, or its function
// failed) is run again and counted when it is. The usage of a step whose function failed
// without being stored is the attempt's, like a report outside any step.
//
// The tree. The usage is also added to the tree totals of the top of the
// run's tree and of every run whose budget it draws from
// (model.Row.Charges; parent.Client.Charge): for a run in a tree with
// a budget at every report, before Usage returns (one compare-and-set per
// budget), so the budget is enforced where the usage lands; for a run in a
// tree without one, at the row sync, before the run's own row. The row
// shows only usage every tree total was charged with (synced): a report
// that arrives between the charge and the row's write waits for the next
// sync, so a kill -9 right after the write cannot leave the run's usage
// ahead of its tree's. A tree's totals count every report they were
// charged with, so a report charged and then lost from the run's own row
// by a kill -9 counts once in the tree and not in the run.
//
// Charges through faults. A charge is a compare-and-set whose answer a
// fault may lose after it landed. Each carries a mark (the attempt, and
// its sequence among the attempt's charges to that row:
// model.ChargeMark) and the charged row keeps the marks of the last
// charges it took (model.Charged), so a charge not answered is sent
// again under its mark, before any later one to that row (chargeRun), and
// counts once. A report's charge is sent again through faults for as long
// as the worker holds its runs, as the row writes are: Usage waits, it
// does not fail the run for a fault (sendCharge).
//
// A step's usage is in every tree total it is charged to before the step
// is stored (chargeStep; in a tree without a budget that is one
// compare-and-set per step with usage on the top of the tree), except the
// run's own when it is the top of a tree without a budget: that one takes
// the step's usage in the row write that counts it on the run (syncedUsage).
// So a takeover adds what the stored steps spent to the run's usage, and
// to its own tree totals only in that case, and a step's usage counts once
// in every tree total too.

// execUsage is an attempt's usage state; mu is a leaf lock, chargeMu
// (held while a charge is on its way) comes before it, and a step's
// charging lock (stepUsage.charging) before both.
type execUsage struct {
	mu       sync.Mutex
	started  bool
	base     *jetruntype.Usage // the row's usage when the attempt started
	attempt  jetruntype.Usage  // reported by this attempt outside steps, and what its steps not stored spent (freeStep)
	synced   *jetruntype.Usage // of attempt, what every run it is charged to was charged with: what the row shows
	charges  []string          // the runs whose tree totals the usage adds to
	budgeted bool
	budgets  []string            // the runs whose budgets the usage counts against (reservations)
	settle   map[string][]string // per run charged, the holds its next charge settles (holds.go)
	selfTree bool                // the run is the top of a tree without a budget: its steps' usage reaches its own tree totals with the row write
	reported jetruntype.Usage    // every report of this attempt, steps' included (the Observer's)

	stepBase  *jetruntype.Usage // the row's stepUsage when the attempt started
	recovered jetruntype.Usage  // what stored steps of earlier attempts spent beyond stepBase
	folded    jetruntype.Usage  // what the steps this attempt stored spent
	foldedBy  map[string]bool   // the steps whose usage is in folded, by name

	chargeMu sync.Mutex
	charged  map[string]jetruntype.UsageTotals // per run charged, the attempt's totals it has (or has on their way: unsure)
	seqs     map[string]uint64                 // per run charged, the sequence of the attempt's last charge there
	unsure   map[string]sentCharge             // per run charged, a charge whose answer did not come: sent again first
}

// Usage reports what the handler spent: reports add up on the run's row
// (usage: totals and per model) and on its tree's (treeUsage on the top of
// the tree). In a tree with a budget each report is counted against it
// before Usage returns; once the tree is stopped for a budget, Usage
// returns ErrBudgetExceeded (wrapped) and the run's context is cancelled.
func (r *Run) Usage(ctx context.Context, u Usage) error {
	if err := u.Validate(); err != nil {
		return fmt.Errorf("worker: usage: %w", err)
	}
	if model.EmptyReport(u) {
		return nil
	}
	if s, ok := ctx.Value(stepUsageKey{}).(*stepUsage); ok {
		s.add(u) // the step's: stored with it
	}
	return r.b.Usage(ctx, u)
}

// Usage is Run.Usage on a worker, with a report that is not empty (and
// added to its step's usage, if it is a step's).
func (e *execution) Usage(ctx context.Context, u Usage) error {
	if err := e.claimLate(ctx); err != nil {
		return err
	}
	s, inStep := ctx.Value(stepUsageKey{}).(*stepUsage)
	if e.ctl.isEnded() {
		return ErrLeaseLost
	}
	if err := e.startUsage(ctx, e.row); err != nil {
		return err
	}
	e.use.mu.Lock()
	model.AddReport(&e.use.reported, u)
	if !inStep {
		model.AddReport(&e.use.attempt, u)
	}
	budgeted := e.use.budgeted
	e.use.mu.Unlock()
	e.settleLimits(u)
	if !inStep {
		e.rw.markDirty()
	}
	if !budgeted {
		return nil
	}
	e.settleHolds()
	var err error
	if inStep {
		err = e.chargeStep(ctx, s)
	} else {
		err = e.chargeTree(ctx, true)
	}
	if err != nil {
		return fmt.Errorf("worker: usage of run %s: %w", e.id, err)
	}
	return nil
}

// startUsage prepares the attempt's usage state at its first report. A
// nested run dispatched by a plain publish names its parent but not its
// tree: the parent's row says which (one read, at the first report).
func (e *execution) startUsage(ctx context.Context, row *model.Row) error {
	e.use.mu.Lock()
	started := e.use.started
	e.use.mu.Unlock()
	if started {
		return nil
	}
	tree := row
	if row.Parent != "" && row.Root == "" {
		p, _, err := e.w.store.Get(ctx, row.Parent)
		switch {
		case errors.Is(err, runstore.ErrRunNotFound):
		case err != nil:
			return fmt.Errorf("worker: usage of run %s: read its parent: %w", e.id, err)
		default:
			tree = row.Clone()
			tree.Root, tree.BudgetFrom = p.ChildTree()
		}
	}
	e.use.mu.Lock()
	defer e.use.mu.Unlock()
	if !e.use.started {
		e.use.started, e.use.base, e.use.stepBase = true, model.CloneUsage(row.Usage), model.CloneUsage(row.StepUsage)
		e.use.charges, e.use.budgeted, e.use.budgets = tree.Charges(), tree.Budgeted(), tree.Budgets()
		e.use.selfTree = !e.use.budgeted && slices.Contains(e.use.charges, e.id)
	}
	return nil
}

// syncedUsage is the usage part of the attempt's row sync (synced;
// cumulative, so idempotent): the run's usage (what the attempt's tree
// totals were charged with, and what the stored steps spent) and the part
// of it the stored steps spent (steps, which says so; with chargeSteps, on
// the top of a tree without a budget, the row adds to its own tree totals
// how far steps moves on). Either is nil when the row's stays as it is.
// behind reports whether the attempt holds reports the row does not show
// yet (charged at the next sync).
func (e *execution) syncedUsage() (usage, steps *jetruntype.Usage, chargeSteps, behind bool) {
	e.use.mu.Lock()
	defer e.use.mu.Unlock()
	if !e.use.started {
		return nil, nil, false, false
	}
	var free jetruntype.Usage
	if e.use.synced != nil {
		free = *e.use.synced
	}
	behind = free.UsageTotals != e.use.attempt.UsageTotals
	stepped := model.PlusUsage(e.use.recovered, e.use.folded)
	if e.use.synced == nil && model.IsZeroUsage(stepped) {
		return nil, nil, false, behind
	}
	// Copies with maps of their own: synced is replaced, never changed.
	var u jetruntype.Usage
	if e.use.base != nil {
		u = *e.use.base
	}
	u = model.PlusUsage(model.PlusUsage(u, free), stepped)
	if model.IsZeroUsage(stepped) {
		return &u, nil, false, behind
	}
	var mark jetruntype.Usage
	if e.use.stepBase != nil {
		mark = *e.use.stepBase
	}
	mark = model.PlusUsage(mark, stepped)
	return &u, &mark, e.use.selfTree, behind
}

// chargeTree adds the attempt's usage not yet charged to the tree totals
// of the runs it is charged to, each on its own (chargeRun). The run's own
// row (the top of its tree, or a run with a budget) is charged through the
// attempt's row writes, so the row sync that follows does not lose a
// compare-and-set to it. A charge is not cut short by the end of the
// handler's context (a cancel by the very stop it caused, say). patient
// says whether to wait for a charge under way and to retry a transient
// fault for as long as the worker holds its runs (reports and the
// attempt's end); the heart's row sync is not (it must not wait: a charge
// that did not land is sent again at the next).
func (e *execution) chargeTree(ctx context.Context, patient bool) error {
	e.use.mu.Lock()
	started := e.use.started
	e.use.mu.Unlock()
	if !started {
		return nil // no usage: nothing on the hot path
	}
	if !patient {
		if !e.use.chargeMu.TryLock() {
			return nil // a report's charge is on its way: the next sync
		}
	} else {
		e.use.chargeMu.Lock()
	}
	defer e.use.chargeMu.Unlock()
	e.use.mu.Lock()
	upTo, charges := model.CloneUsage(&e.use.attempt), e.use.charges
	e.use.mu.Unlock()
	total := upTo.UsageTotals
	var (
		errs []error
		over error
	)
	for _, id := range charges {
		d := model.SubTotals(total, e.use.charged[id])
		if _, unsure := e.use.unsure[id]; model.IsZeroTotals(d) && !unsure && !e.settling(id) {
			continue
		}
		taken, err := e.chargeRun(ctx, id, d, patient)
		if taken {
			e.use.setCharged(id, total)
		}
		switch {
		case errors.Is(err, parent.ErrBudgetExceeded):
			over = err
		case err != nil:
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && len(e.use.unsure) == 0 {
		e.use.markSynced(upTo)
	}
	if over != nil {
		e.ctl.cancelWith(over)
		return over
	}
	return errors.Join(errs...)
}

// sentCharge is one charge of the attempt to a run's tree totals: its
// sequence among the attempt's charges to that run, and the usage.
type sentCharge struct {
	seq     uint64
	d       jetruntype.UsageTotals
	settles []string // the holds it settles (holds.go)
}

// chargeRun charges d to the tree totals of run id as the attempt's next
// charge there; the caller holds chargeMu. A charge whose answer did not
// come is kept (unsure) and sent again, under its own sequence, before any
// other charge to that run: it counts once whether it had landed or not
// (model.Charged), and no later charge of the attempt overtakes it.
// taken says whether d is charged or on its way as such a charge (the
// caller counts it as charged; the row shows it once nothing is unsure):
// false when an earlier unsure charge still did not get through.
func (e *execution) chargeRun(ctx context.Context, id string, d jetruntype.UsageTotals, patient bool) (taken bool, err error) {
	var over error
	if c, ok := e.use.unsure[id]; ok {
		err := e.sendCharge(ctx, id, c, patient)
		if err != nil && !errors.Is(err, parent.ErrBudgetExceeded) {
			return false, err
		}
		delete(e.use.unsure, id)
		over = err
	}
	settles := e.takeSettles(id)
	if model.IsZeroTotals(d) && len(settles) == 0 {
		return true, over
	}
	if e.use.seqs == nil {
		e.use.seqs = make(map[string]uint64)
	}
	e.use.seqs[id]++
	c := sentCharge{seq: e.use.seqs[id], d: d, settles: settles}
	err = e.sendCharge(ctx, id, c, patient)
	switch {
	case errors.Is(err, parent.ErrBudgetExceeded):
		return true, err
	case err != nil:
		if e.use.unsure == nil {
			e.use.unsure = make(map[string]sentCharge)
		}
		e.use.unsure[id] = c
		return true, err
	}
	return true, over
}

// sendCharge sends charge c to the tree totals of run id. patient, it
// sends it again after a transient fault (each try within writeTimeout) for
// as long as the worker holds its runs, as the attempt's row writes do,
// and at least writeTimeout: a fault must not fail the run. It then
// returns ErrLeaseLost (wrapped): the attempt stops. A charge sent again
// counts once (model.Charged).
func (e *execution) sendCharge(ctx context.Context, id string, c sentCharge, patient bool) error {
	ev := model.Charged{Mark: model.ChargeMark{Run: e.id, Attempt: e.attempt, Seq: c.seq}, Delta: c.d, Settles: c.settles}
	first := time.Now()
	var pause *backoff.ExponentialBackOff
	for {
		base := ctx // the heart's sync: within its beat
		if patient {
			base = context.WithoutCancel(ctx)
		}
		tctx, cancel := context.WithTimeout(base, writeTimeout)
		var err error
		if id == e.id {
			err = e.chargeSelf(tctx, ev)
		} else {
			err = e.w.trees.ChargeVia(tctx, id, ev, e.chargeWriter())
		}
		cancel()
		if err == nil || errors.Is(err, parent.ErrBudgetExceeded) || !patient || !jsfault.IsTransient(context.Background(), err) {
			return err
		}
		until := later(e.w.holdsUntil(), first.Add(writeTimeout))
		if !time.Now().Before(until) {
			return fmt.Errorf("worker: charge usage to run %s: the worker's liveness ran out during a fault: %w: %w", id, ErrLeaseLost, err)
		}
		e.w.fault(ctx, e.log, "charge usage to a run's tree; retrying", err, "charged_run", id)
		if pause == nil {
			pause = jsfault.NewBackOff(maxFaultPause)
		}
		_ = jsfault.Sleep(context.Background(), min(pause.NextBackOff(), time.Until(until)+time.Millisecond))
	}
}

// setCharged records that every run id was charged with the attempt's
// totals up to total (or has them on their way).
func (s *execUsage) setCharged(id string, total jetruntype.UsageTotals) {
	if s.charged == nil {
		s.charged = make(map[string]jetruntype.UsageTotals)
	}
	s.charged[id] = total
}

// markSynced records that every run the attempt's usage is charged to has
// been charged with u.
func (s *execUsage) markSynced(u *jetruntype.Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = u
}

// chargeSelf charges the run's own tree totals (ev), as
// budget.Trees.Charge does another run's.
func (e *execution) chargeSelf(ctx context.Context, ev model.Charged) error {
	var crossed, was *jetruntype.Overrun
	now := time.Now()
	if _, err := e.write(ctx, func(r *model.Row) error {
		was, crossed = r.Overrun, nil
		if err := model.Apply(r, ev, now); err != nil {
			return err // runstore.ErrNoChange: a charge taken already
		}
		if was == nil {
			crossed = r.Overrun // the charge took the tree past its budget
		}
		return nil
	}); err != nil {
		return fmt.Errorf("worker: charge usage to run %s: %w", e.id, err)
	}
	o := crossed
	if o == nil {
		o = was
	}
	if o == nil {
		return nil
	}
	if err := e.w.trees.Stop(ctx, *o); err != nil {
		e.log.WarnContext(ctx, "stop a tree past its budget; the reconciler completes it", "err", err)
	}
	return fmt.Errorf("worker: %w: %s", parent.ErrBudgetExceeded, o)
}

// chargeAtSync charges the tree of an unbudgeted run before the heart's
// row sync; a fault is logged and the charge sent again at the next.
func (e *execution) chargeAtSync(ctx context.Context) {
	if err := e.chargeTree(ctx, false); err != nil && !errors.Is(err, parent.ErrBudgetExceeded) {
		e.log.WarnContext(ctx, "charge usage to the run's tree; retried at the next row sync", "err", err)
	}
}

// chargeAtEnd charges what the attempt's tree totals were not charged
// with yet before the write that ends the attempt, through faults for as
// long as the worker holds its runs; the row shows what landed. Then it
// releases the attempt's reservations that no report settled.
func (e *execution) chargeAtEnd() {
	ctx := context.Background()
	if err := e.chargeTree(ctx, true); err != nil && !errors.Is(err, parent.ErrBudgetExceeded) {
		e.w.fault(ctx, e.log, "charge usage to the run's tree at the attempt's end", err)
	}
	e.releaseHolds()
}

// budgetStop ends an attempt whose handler returned ErrBudgetExceeded:
// interrupted, reason budget-exceeded (a run the tree's stop reached first
// keeps the interrupt it wrote).
func (e *execution) budgetStop(herr, cause error) {
	if herr == nil || !errors.Is(herr, ErrBudgetExceeded) {
		herr = cause
	}
	e.finalize(events.StatusInterrupted, events.ReasonBudgetExceeded, herr.Error(), result{})
}

// keepsBudgetStop reports whether an attempt's outcome status leaves r,
// interrupted, as it is: a run stopped for its tree's budget stays stopped
// unless it completed (the handler's error is most likely the stop's own
// doing, a child's failure or a refused report).
func keepsBudgetStop(r *model.Row, status events.Status) bool {
	return r.Overrun != nil && r.Reason == events.ReasonBudgetExceeded && status != events.StatusCompleted
}

// attemptUsage returns what this attempt reported.
func (e *execution) attemptUsage() events.Usage {
	e.use.mu.Lock()
	defer e.use.mu.Unlock()
	u := e.use.reported
	u.Models = maps.Clone(u.Models)
	return u
}
