package model

import (
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// What the reconciler does with a row is decided here, by Due, without
// I/O: the sweep (internal/engine/reconcile) reads the row and the few
// facts that need a read (Facts), calls Due, and executes the actions it
// returns, in order, each write a model event under a compare-and-set.
// What an action's execution still looks up in a stream (is the lost
// dispatch still queued? is a copy of the finish still waiting? does a
// deliverer follow the handler?) is the guard that keeps it idempotent,
// not a decision: the action says what to check, and what to do then.

// Policy is what the reconciler decides by: its configured durations and
// limits (zero values are not defaults here: the reconciler fills them).
type Policy struct {
	// Interval is the time between sweeps: an owed finish or notice due
	// for less than that is left to its transition's own publish.
	Interval time.Duration
	// DedupWindow is the finish stream's: past half of it, a republish of
	// a finish whose copy is unknown looks for the copy first.
	DedupWindow time.Duration
	// FinishUnservedAfter and FinishUnservedWait: how long a finish no
	// deliverer took may wait before, if no deliverer follows its handler,
	// the row says so, and then before it is dead-lettered.
	FinishUnservedAfter time.Duration
	FinishUnservedWait  time.Duration
	// StartingGrace: how long a run may wait for a worker before its
	// dispatch is checked; LeaseGrace: how long after its lease expired a
	// run no live worker holds is.
	StartingGrace time.Duration
	LeaseGrace    time.Duration
	// MaxRedispatches bounds the re-dispatches of a run whose dispatch was
	// lost; then the run ends "error" (dispatch-lost).
	MaxRedispatches int
	// MaxBudget and NoProgressBudget are a detached run's budgets when its
	// dispatch sets none (negative: none).
	MaxBudget        time.Duration
	NoProgressBudget time.Duration
}

// Facts are what the sweep read before deciding on a row: Due does no I/O.
type Facts struct {
	// HolderAlive: a live worker holds the row (its liveness key).
	HolderAlive bool
	// Parent is the row of the run's parent (nil: none, or gone).
	Parent *Row
}

// Action is one thing the reconciler does to a run, decided by Due. The
// set is closed: the action types of this package.
type Action interface{ action() }

// Unindex: the run is settled (nothing more will happen to it); its entry
// leaves the active-run index.
type Unindex struct{}

// UnservedStep is what a republish of a finish no deliverer took does
// first, if no deliverer follows its handler.
type UnservedStep int

const (
	// UnservedNothing: nothing; the finish is republished as any other.
	UnservedNothing UnservedStep = iota
	// UnservedMark: the row records that the handler is not served
	// (FinishUnserved), then the finish is republished.
	UnservedMark
	// UnservedDeadLetter: the finish is dead-lettered and given up on the
	// row (UnservedFinishFailed), not republished.
	UnservedDeadLetter
)

// RepublishFinish: the finish for Status (its ending Ending) is owed and
// no delivery is under way: it is published again, unless a copy still
// waits in the finish stream (Copy, its recorded sequence, 0 if unknown;
// with LookForCopy, the copy is looked for by its message id first, past
// the dedup window's reach). Unserved, when set, is done first if no
// deliverer follows Handler: the finish has waited Waited untaken.
type RepublishFinish struct {
	Status      events.Status
	Ending      int
	Copy        uint64
	LookForCopy bool
	Unserved    UnservedStep
	Handler     string
	Waited      time.Duration
}

// RepublishNotice: the notice of milestone Name is owed and no delivery is
// under way: it is published again unless its copy (Copy, 0 if unknown)
// still waits in the finish stream.
type RepublishNotice struct {
	Name string
	Copy uint64
}

// RenotifyCancel: the run's cancel is recorded and its worker still runs
// it; the cancel event is published again (the writer's may have been
// lost), paced.
type RenotifyCancel struct{}

// StopForTree: the run's parent was stopped for its tree's budget
// (Overrun): the run is stopped too (BudgetStopped).
type StopForTree struct{ Overrun jetruntype.Overrun }

// CascadeCancel: the run's parent (Parent) was cancelled: the run is
// cancelled too (CancelRequested).
type CascadeCancel struct{ Parent string }

// AdvanceKey: the run is queued on concurrency key Key: the key is
// repaired (keys.Repair), once per sweep.
type AdvanceKey struct{ Key string }

// GiveUpByBudget: the detached run is past a budget: it is given up
// (GaveUp) with Reason and Text.
type GiveUpByBudget struct {
	Reason string
	Text   string
}

// WatchBudget: the detached run is within its budgets until At: it is to
// be looked at again then, if that comes before the next sweep.
type WatchBudget struct{ At time.Time }

// ReleaseLostChild: the given-up run's worker died before it confirmed the
// child stopped, and its lease expired long ago: no child runs; its
// holder is released (ChildStopped).
type ReleaseLostChild struct{}

// AskHolder: the running run's holder, Worker, is alive: it is asked
// (with the other runs it holds, after the sweep) whether it executes it.
type AskHolder struct{ Worker string }

// Dispatch: nothing will wake the run (Why), and where its dispatch is was
// never recorded: it is published under the message id its writer used
// (DispatchMsgID), which the dedup window turns into a lookup.
type Dispatch struct{ Why string }

// Redispatch: nothing will wake the run (Why): unless its dispatch at
// stream sequence Lost is still queued, it is published again, the N-th
// time (Redispatched).
type Redispatch struct {
	Why  string
	Lost uint64
	N    int
}

// FailDispatchLost: nothing will wake the run and its dispatch was lost
// MaxRedispatches times: unless its dispatch at Lost is still queued, it
// ends "error" (dispatch-lost) with Text.
type FailDispatchLost struct {
	Lost uint64
	Text string
}

func (Unindex) action()          {}
func (RepublishFinish) action()  {}
func (RepublishNotice) action()  {}
func (RenotifyCancel) action()   {}
func (StopForTree) action()      {}
func (CascadeCancel) action()    {}
func (AdvanceKey) action()       {}
func (GiveUpByBudget) action()   {}
func (WatchBudget) action()      {}
func (ReleaseLostChild) action() {}
func (AskHolder) action()        {}
func (Dispatch) action()         {}
func (Redispatch) action()       {}
func (FailDispatchLost) action() {}

// Due returns what the reconciler does with r at now, in order: a settled
// run leaves the index; an owed finish or notice no delivery is under way
// for is republished; a final run gets nothing more. A live one is, in
// this order and only the first that applies: stopped with its parent's
// tree, cancelled with its parent, its key advanced (queued), given up by
// a budget, or its lost child released; then its live holder is asked
// about it, and a run nothing will wake is dispatched again.
func Due(r *Row, now time.Time, p Policy, f Facts) []Action {
	if r.Settled() {
		return []Action{Unindex{}}
	}
	acts := r.republishes(now, p)
	if r.Status.Final() {
		return acts // its finishes are on their way
	}
	if r.CancelRequested && r.Live() && r.Worker != "" {
		acts = append(acts, RenotifyCancel{})
	}
	if a := r.fromParent(f.Parent); a != nil {
		return append(acts, a)
	}
	if r.Status == events.StatusQueued {
		if r.ConcurrencyKey != "" {
			acts = append(acts, AdvanceKey{Key: r.ConcurrencyKey})
		}
		return acts
	}
	if a := r.DueBudget(now, p); a != nil {
		acts = append(acts, a)
		if _, over := a.(GiveUpByBudget); over {
			return acts
		}
	}
	if r.Status == events.StatusInterrupted && r.ChildStillRunning && !f.HolderAlive && now.Sub(r.LeaseUntil) > p.LeaseGrace {
		return append(acts, ReleaseLostChild{})
	}
	if r.Status == events.StatusRunning && r.Worker != "" && r.WorkerEpoch != "" && f.HolderAlive {
		acts = append(acts, AskHolder{Worker: r.Worker})
	}
	if a := r.recovery(now, p, f); a != nil {
		acts = append(acts, a)
	}
	return acts
}

// republishes returns the republishes of the finishes, then the notices, r
// owes with no delivery under way, due for at least an interval.
func (r *Row) republishes(now time.Time, p Policy) []Action {
	var acts []Action
	for _, o := range r.Owed() {
		s := slotOf(o.Slot)
		if !s.Republishable(now, p.Interval) {
			continue // the fast path is on it
		}
		if o.Milestone != "" {
			acts = append(acts, RepublishNotice{Name: o.Milestone, Copy: s.Seq})
			continue
		}
		fs := r.Finishes[o.Status]
		a := RepublishFinish{Status: o.Status, Ending: fs.Ending, Copy: s.Seq}
		if r.Detached != nil {
			a.LookForCopy = s.CopyUnknown(now, p.DedupWindow)
			if s.Unserved(now, p.FinishUnservedAfter) {
				a.Handler, a.Waited = r.Detached.OnFinish, s.Waited(now)
				switch {
				case s.Unserved(now, p.FinishUnservedWait):
					a.Unserved = UnservedDeadLetter
				case fs.UnservedSince.IsZero():
					a.Unserved = UnservedMark
				}
			}
		}
		acts = append(acts, a)
	}
	return acts
}

// fromParent returns what r's parent's end asks of r: stop with its
// tree's budget (before the cascade, which would otherwise abort r: a run
// stopped for a budget has its cancel requested), or be cancelled with it.
// A parent given up (a budget, a window) is not cancelled: its children
// are left to finish.
func (r *Row) fromParent(p *Row) Action {
	if r.Parent == "" || p == nil {
		return nil
	}
	if r.Status != events.StatusInterrupted && p.Overrun != nil && p.Status == events.StatusInterrupted &&
		p.Reason == events.ReasonBudgetExceeded {
		return StopForTree{Overrun: *p.Overrun}
	}
	if (!r.CancelRequested || r.Teardown) && p.CancelCascades() {
		return CascadeCancel{Parent: p.ID}
	}
	return nil
}

// DueBudget returns, for a detached run waiting for a worker or running,
// GiveUpByBudget if it is past a budget at now, else WatchBudget for when
// one would run out (nil if none applies).
func (r *Row) DueBudget(now time.Time, p Policy) Action {
	if r.Detached == nil || (r.Status != events.StatusRunning && r.Status != events.StatusStarting) {
		return nil
	}
	if reason, text := r.OverBudget(now, p); reason != "" {
		return GiveUpByBudget{Reason: reason, Text: text}
	}
	if at := r.budgetDue(now, p); !at.IsZero() {
		return WatchBudget{At: at}
	}
	return nil
}

// OverBudget returns the give-up reason and text of a detached run past
// its absolute budget, or silent for longer than its no-progress budget
// (armed by its first signal; a run waiting for a signal is not silent);
// "" if it is within them at now.
func (r *Row) OverBudget(now time.Time, p Policy) (reason, text string) {
	if r.Detached == nil {
		return "", ""
	}
	if budget, on := wire.Budget(r.Detached.MaxBudgetMs, p.MaxBudget); on && now.Sub(r.BudgetSince()) > budget {
		return events.ReasonBudgetExceeded, fmt.Sprintf("ran past its absolute budget of %s", budget)
	}
	silence, on := wire.Budget(r.Detached.NoProgressBudgetMs, p.NoProgressBudget)
	if since, runs := r.NoProgressSince(); on && runs && now.Sub(since) > silence {
		return events.ReasonNoProgress, fmt.Sprintf("made no progress for %s (its no-progress budget)", silence)
	}
	return "", ""
}

// budgetSlack is the least overrun of a budget the reconciler allows.
const budgetSlack = 100 * time.Millisecond

// budgetDue returns when r, within its budgets at now, should be looked at
// again: when one of them would run out with no sign of progress, or, while
// its no-progress budget is not armed or does not run (no signal yet,
// waiting for one), a tenth of that budget (budgetSlack at least) from now,
// to see it start. Zero when no budget applies.
func (r *Row) budgetDue(now time.Time, p Policy) time.Time {
	var due time.Time
	sooner := func(t time.Time) {
		if due.IsZero() || t.Before(due) {
			due = t
		}
	}
	if budget, on := wire.Budget(r.Detached.MaxBudgetMs, p.MaxBudget); on {
		sooner(r.BudgetSince().Add(budget))
	}
	if silence, on := wire.Budget(r.Detached.NoProgressBudgetMs, p.NoProgressBudget); on {
		if since, runs := r.NoProgressSince(); runs {
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

// recovery returns the repair of a run nothing will wake: "starting" past
// its grace, or running with a long-expired lease and no live holder.
func (r *Row) recovery(now time.Time, p Policy, f Facts) Action {
	var why string
	switch {
	case r.Status == events.StatusStarting && now.Sub(r.WaitingSince()) > p.StartingGrace:
		why = "dispatch lost before a worker took it"
	case r.Status == events.StatusRunning && !f.HolderAlive && now.Sub(r.LeaseUntil) > p.LeaseGrace:
		why = "lease expired and the dispatch that would wake a worker is gone"
	default:
		return nil
	}
	switch {
	case r.DispatchSeq == 0:
		return Dispatch{Why: why}
	case r.Redispatches >= p.MaxRedispatches:
		return FailDispatchLost{Lost: r.DispatchSeq, Text: fmt.Sprintf("the run's dispatch was lost %d times; giving up", r.Redispatches+1)}
	}
	return Redispatch{Why: why, Lost: r.DispatchSeq, N: r.Redispatches + 1}
}

// Expired reports whether retention clears r at now: it is settled and
// finished longer than retention ago (never with retention zero or
// negative).
func (r *Row) Expired(now time.Time, retention time.Duration) bool {
	return retention > 0 && r.Settled() && !r.FinishedAt.IsZero() && r.FinishedAt.Before(now.Add(-retention))
}

// Republishable reports whether the slot has been due for at least every
// and no deliverer's claim runs at now: its transition's own publish had
// its time, and no delivery is under way.
func (s *slot) Republishable(now time.Time, every time.Duration) bool {
	return now.Sub(s.DueAt) >= every && !s.ClaimedUntil.After(now)
}

// Unserved reports whether no deliverer has ever taken the slot in the
// after it has been due.
func (s *slot) Unserved(now time.Time, after time.Duration) bool {
	return s.Attempts == 0 && now.Sub(s.DueAt) >= after
}

// Waited is how long the slot has been due at now.
func (s *slot) Waited(now time.Time) time.Duration { return now.Sub(s.DueAt) }

// CopyUnknown reports whether where the slot's copy waits is not recorded
// and a republish may fall past the dedup window (half of it is gone):
// the copy is to be looked for rather than published again.
func (s *slot) CopyUnknown(now time.Time, window time.Duration) bool {
	return s.Seq == 0 && now.Sub(s.DueAt) >= window/2
}
