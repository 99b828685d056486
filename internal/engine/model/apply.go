package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// A run's row changes by events, one type per transition, each with the
// fields that transition needs, applied by Apply: the one function every
// writer of a row calls (inside its compare-and-set, runstore.Store.Mutate),
// so a transition's rules live here and nowhere else. enter is the one
// place that assigns a row's status and the fields that go with it.
//
// Apply is pure: the caller reads the clock once, before its
// compare-and-set, and passes it in (now); a fact that needs I/O (is the
// holder alive?) is computed by the caller and carried by the event
// (Held).

// Event is one transition of a run's row. The set is closed: the event
// types of this package.
type Event interface {
	// apply changes r by the event at now, or returns ErrNoChange, or a
	// *TransitionError, leaving r as it was.
	apply(r *Row, now time.Time) error
}

var (
	// ErrNotHolder is wrapped by the *TransitionError Apply returns for an
	// attempt's event (one that names a Holder) on a row that attempt no
	// longer holds: the run was taken over, released, ended or given up
	// meanwhile. A worker maps it to its lease being lost.
	ErrNotHolder = errors.New("the attempt does not hold the run")
	// ErrNotAllowed is wrapped by the *TransitionError Apply returns for an
	// event that its row's status does not admit (a claim of a final run).
	ErrNotAllowed = errors.New("not allowed in the run's status")
)

// TransitionError is the error Apply returns for an event the row refuses;
// Err is ErrNotHolder or ErrNotAllowed.
type TransitionError struct {
	Event  string        // the event's type, e.g. "Claimed"
	Status events.Status // the row's status
	Err    error
}

// Error implements error.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("model: %s on a run %s: %v", e.Event, e.Status, e.Err)
}

// Unwrap returns Err.
func (e *TransitionError) Unwrap() error { return e.Err }

// OverrunError is the error Apply returns for RunCounted on a row whose
// runs budget has no room for another run.
type OverrunError struct{ Overrun jetruntype.Overrun }

// Error implements error.
func (e *OverrunError) Error() string { return "model: over budget: " + e.Overrun.String() }

// Apply changes r by ev at now. It returns ErrNoChange when ev changes
// nothing in r's state (runstore.Store.Mutate then leaves the row as it
// is), a *TransitionError when r's state does not admit ev, or an
// *OverrunError for RunCounted past a budget; on any error r is as it was.
func Apply(r *Row, ev Event, now time.Time) error {
	if ev == nil {
		return &TransitionError{Event: "nil", Status: r.Status, Err: ErrNotAllowed}
	}
	return ev.apply(r, now)
}

// ApplyAll applies evs to r in order at now, as one write: it returns
// ErrNoChange when none of them changed anything, and stops at the first
// other error (r may then hold the events before it: a Mutate function
// that returns an error writes nothing).
func ApplyAll(r *Row, now time.Time, evs ...Event) error {
	changed := false
	for _, ev := range evs {
		err := Apply(r, ev, now)
		if errors.Is(err, ErrNoChange) {
			continue
		}
		if err != nil {
			return err
		}
		changed = true
	}
	if !changed {
		return ErrNoChange
	}
	return nil
}

// Mutation returns a runstore.Store.Mutate function that applies evs at now
// (ApplyAll).
func Mutation(now time.Time, evs ...Event) func(*Row) error {
	return func(r *Row) error { return ApplyAll(r, now, evs...) }
}

// refuse is the error for ev, which r's state does not admit (why is
// ErrNotAllowed or ErrNotHolder).
func refuse(ev Event, r *Row, why error) error {
	name := fmt.Sprintf("%T", ev)
	return &TransitionError{Event: name[strings.LastIndexByte(name, '.')+1:], Status: r.Status, Err: why}
}

// Holder names one attempt of a run: the worker that claimed it, the epoch
// of that worker's liveness key ("" matches any) and the attempt.
type Holder struct {
	Worker  string
	Epoch   string
	Attempt int
}

// holds reports whether h holds r: r is not final and names h's worker,
// attempt (and epoch, when h names one).
func (h Holder) holds(r *Row) bool {
	return h.Worker != "" && !r.Status.Final() && r.Worker == h.Worker && r.Attempt == h.Attempt &&
		(h.Epoch == "" || r.WorkerEpoch == h.Epoch)
}

// fence returns nil when h holds r (or h is zero: not an attempt's write),
// else the ErrNotHolder refusal of ev.
func (h Holder) fence(ev Event, r *Row) error {
	if h == (Holder{}) || h.holds(r) {
		return nil
	}
	return refuse(ev, r, ErrNotHolder)
}

// enter moves r to status s at now: the one place that assigns a row's
// status and sets or clears what goes with it. A run waiting to start
// (queued, starting) has no holder, no attempt under way (startedAt), no
// wait, no cancel, no reason; a running one has started (startedAt, kept
// across takeovers) and its no-progress clock, if armed, restarts with the
// attempt; a given-up one (interrupted) is retryable, and its child still
// runs exactly while a holder is left on it; a final one has no holder,
// no child running and no wait. The event that enters supplies the rest (its reason,
// its holder, its finish: oweFinish).
func (r *Row) enter(s events.Status, now time.Time) {
	r.Status = s
	switch {
	case s == events.StatusQueued || s == events.StatusStarting:
		r.Reason, r.Error, r.Retryable, r.ChildStillRunning = "", "", false, false
		r.CancelRequested, r.CancelReason, r.Teardown = false, "", false
		r.release()
		r.StartedAt, r.LastSignalAt, r.FinishedAt = time.Time{}, time.Time{}, time.Time{}
		r.WaitingFor = ""
		if s == events.StatusStarting {
			// Its budgets and its wait for a worker count from here.
			r.ReadyAt, r.NotBefore = now, time.Time{}
		}
	case s == events.StatusRunning:
		r.Reason, r.Error, r.Retryable, r.ChildStillRunning = "", "", false, false
		r.WaitingFor = "" // a lost attempt's wait is not the new one's
		r.FinishedAt = time.Time{}
		if r.StartedAt.IsZero() {
			r.StartedAt = now
		}
		r.restartNoProgress(now)
	case s == events.StatusInterrupted:
		r.Retryable = true
		r.ChildStillRunning = r.Worker != ""
		r.FinishedAt = now
	case s.Final():
		r.Retryable, r.ChildStillRunning = false, false
		r.release()
		r.WaitingFor = "" // nothing more comes to a run that ended
		r.FinishedAt = now
	}
}

// release clears r's holder: no worker executes it any more, so no child
// of a give-up runs either.
func (r *Row) release() {
	r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
	r.ChildStillRunning = false
}

// end moves r to the final status s with reason and text and, for a
// detached run with a finish handler, owes the finish for s.
func (r *Row) end(s events.Status, reason, text string, now time.Time) {
	r.enter(s, now)
	r.Reason, r.Error = reason, text
	r.oweFinish(s, now)
}

// interrupt gives r up (soft) with reason and text: its child goes on
// (still: its holder stays) or has stopped (released). A finish is owed
// for "interrupted".
func (r *Row) interrupt(reason, text string, still bool, now time.Time) {
	if !still {
		r.release()
	}
	r.enter(events.StatusInterrupted, now)
	r.Reason, r.Error = reason, text
	r.oweFinish(events.StatusInterrupted, now)
}

// requestCancel records a cancel for reason: a cancel, not a give-up's
// teardown.
func (r *Row) requestCancel(reason string) {
	r.CancelRequested, r.CancelReason, r.Teardown = true, reason, false
}

// Claimed: Worker (whose liveness key has epoch Epoch) claims the run for a
// new attempt, woken by the dispatch at stream sequence DispatchSeq. A run
// waiting for a worker (starting) or whose holder is gone (running) may be
// claimed; the caller made sure no live worker holds it.
type Claimed struct {
	Worker      string
	Epoch       string
	DispatchSeq uint64
}

func (ev Claimed) apply(r *Row, now time.Time) error {
	if r.Status != events.StatusStarting && r.Status != events.StatusRunning {
		return refuse(ev, r, ErrNotAllowed)
	}
	r.Attempt++
	r.enter(events.StatusRunning, now)
	r.Worker, r.WorkerEpoch, r.LeaseUntil = ev.Worker, ev.Epoch, time.Time{}
	r.DispatchSeq = ev.DispatchSeq
	return nil
}

// HandedBack: the attempt By gives the run back with its process alive (a
// graceful shutdown, a failed start, a release of a run left behind, a
// holder that says it does not execute it): the holder is released and the
// attempt counts as a hand-off (HandOff), not against the attempt limit.
type HandedBack struct{ By Holder }

func (ev HandedBack) apply(r *Row, _ time.Time) error {
	if !ev.By.holds(r) {
		return refuse(ev, r, ErrNotHolder)
	}
	r.release()
	r.handOff()
	return nil
}

// Lapsed: the attempt By stopped because its worker's liveness lapsed
// while its process lived on: the holder is released and the attempt
// counts as a blink (RefundBlink), a hand-off.
type Lapsed struct{ By Holder }

func (ev Lapsed) apply(r *Row, _ time.Time) error {
	if !ev.By.holds(r) {
		return refuse(ev, r, ErrNotHolder)
	}
	r.release()
	r.refundBlink(ev.By.Attempt)
	return nil
}

// Blinked records that Attempt, no longer holding the run, ended with a
// lapse of its worker's liveness (RefundBlink); ErrNoChange if recorded
// already, or the run is final.
type Blinked struct{ Attempt int }

func (ev Blinked) apply(r *Row, _ time.Time) error {
	if r.Status.Final() || !r.refundBlink(ev.Attempt) {
		return ErrNoChange
	}
	return nil
}

// Retrying: the attempt By ends asking for another one (its handler
// returned RetryAfter): the holder is released without a hand-off, so the
// next claim counts against the attempt limit, and Error (what the next
// attempt retries) is shown until that claim.
type Retrying struct {
	By    Holder
	Error string
}

func (ev Retrying) apply(r *Row, _ time.Time) error {
	if !ev.By.holds(r) {
		return refuse(ev, r, ErrNotHolder)
	}
	r.release()
	r.Error = ev.Error
	return nil
}

// Ended: the run reached the final Status, with Reason and Error (and for
// completed, the handler's Summary and Output). By names the attempt that
// ends it (zero: a run no attempt executes). A detached run with a finish
// handler owes the finish. ErrNoChange if the run is final already.
type Ended struct {
	By      Holder
	Status  events.Status
	Reason  string
	Error   string
	Summary string
	Output  json.RawMessage
}

func (ev Ended) apply(r *Row, now time.Time) error {
	if !ev.Status.Final() {
		return refuse(ev, r, ErrNotAllowed)
	}
	if err := ev.By.fence(ev, r); err != nil {
		return err
	}
	if r.Status.Final() {
		return ErrNoChange
	}
	r.end(ev.Status, ev.Reason, ev.Error, now)
	if ev.Status == events.StatusCompleted {
		r.Summary, r.Output = ev.Summary, ev.Output
	}
	return nil
}

// Interrupted: the attempt By gives the run up itself (soft: interrupted,
// with Reason and Error) and its child has stopped. ErrNoChange if the run
// is final.
type Interrupted struct {
	By     Holder
	Reason string
	Error  string
}

func (ev Interrupted) apply(r *Row, now time.Time) error {
	if err := ev.By.fence(ev, r); err != nil {
		return err
	}
	if r.Status.Final() || r.Status == events.StatusQueued {
		return ErrNoChange
	}
	r.interrupt(ev.Reason, ev.Error, false, now)
	return nil
}

// GaveUp: a budget or a caller's window gives up a run waiting for a
// worker or running (interrupted, with Reason and Error), and asks the
// worker executing it, if any (Held: its holder is alive), to stop its
// child: a teardown, not a cancel (CancelCascades), so its descendants are
// left as they are; a cancel requested before stays a cancel. ErrNoChange
// for a run in any other status.
type GaveUp struct {
	Reason string
	Error  string
	Held   bool
}

func (ev GaveUp) apply(r *Row, now time.Time) error {
	if r.Status != events.StatusStarting && r.Status != events.StatusRunning {
		return ErrNoChange
	}
	r.interrupt(ev.Reason, ev.Error, ev.Held && r.Worker != "", now)
	r.askStop(ev.Reason)
	return nil
}

// BudgetStopped: the budget Overrun names was exceeded in the run's tree:
// the run is given up (interrupted, reason budget-exceeded) with the
// overrun recorded; a running run a live worker executes (Held) keeps its
// worker until it stopped (a teardown tells it to). ErrNoChange for a run
// that is final or interrupted already.
type BudgetStopped struct {
	Overrun jetruntype.Overrun
	Held    bool
}

func (ev BudgetStopped) apply(r *Row, now time.Time) error {
	if r.Status.Final() || r.Status == events.StatusInterrupted {
		return ErrNoChange
	}
	if r.Overrun == nil || r.Overrun.Owner != ev.Overrun.Owner {
		o := ev.Overrun
		r.Overrun = &o
	}
	still := ev.Held && r.Status == events.StatusRunning && r.Worker != ""
	r.interrupt(events.ReasonBudgetExceeded, ev.Overrun.String(), still, now)
	if still {
		r.askStop(events.ReasonBudgetExceeded) // its tree is stopped by its budget, not cancelled
	}
	return nil
}

// ChildStopped: no worker executes the given-up run any more (its child's
// teardown ended, By naming the attempt that stopped; or, By zero, its
// worker was lost): its holder is released. ErrNoChange for a run not
// interrupted, or whose child stopped already.
type ChildStopped struct{ By Holder }

func (ev ChildStopped) apply(r *Row, _ time.Time) error {
	if err := ev.By.fence(ev, r); err != nil {
		return err
	}
	if r.Status != events.StatusInterrupted || (!r.ChildStillRunning && r.Worker == "" && r.LeaseUntil.IsZero()) {
		return ErrNoChange
	}
	r.release()
	return nil
}

// CancelRequested: someone asks the run to stop, for Reason. A run no live
// worker holds (queued, starting, or running with its holder dead: Held
// false) is aborted at once; a running one gets cancelRequested, which its
// worker acts on once told. A run already given up stays interrupted (its
// child, if still running, is asked to stop), now cancelled: a cancel on
// top of a give-up's teardown clears the teardown, so its descendants are
// cancelled too (CancelCascades). ErrNoChange for a final run or a cancel
// requested already.
type CancelRequested struct {
	Reason string
	Held   bool
}

func (ev CancelRequested) apply(r *Row, now time.Time) error {
	held := ev.Held && r.Worker != ""
	switch {
	case r.Status.Final():
		return ErrNoChange
	case r.Status == events.StatusStarting || r.Status == events.StatusQueued ||
		r.Status == events.StatusRunning && !held:
		r.requestCancel(ev.Reason)
		r.end(events.StatusAborted, events.ReasonCancelled, "cancelled: "+ev.Reason, now)
		return nil
	case r.CancelRequested && !r.Teardown:
		return ErrNoChange
	}
	r.requestCancel(ev.Reason)
	return nil
}

// Resumed: a given-up run whose child stopped starts again as a new
// attempt (starting; with Queued, queued for its concurrency key) that
// keeps its milestones, counters and finish ledger. Its budgets start
// again from now (ReadyAt), and so does the count of its lost dispatches;
// the attempt given up is a hand-off (HandOff: once, so resumes with no
// attempt between them do not widen the limit); the give-up's finish slot
// is marked so that a later give-up is announced too (oweFinish).
// ErrNoChange for a run in any other state, or Queued without a key.
type Resumed struct{ Queued bool }

func (ev Resumed) apply(r *Row, now time.Time) error {
	if r.Status != events.StatusInterrupted || r.ChildStillRunning || (ev.Queued && r.ConcurrencyKey == "") {
		return ErrNoChange
	}
	if ev.Queued {
		r.enter(events.StatusQueued, now)
		r.ReadyAt = now
	} else {
		r.enter(events.StatusStarting, now)
	}
	r.DispatchSeq, r.Redispatches = 0, 0
	r.handOff()
	if fs := r.Finishes[events.StatusInterrupted]; fs != nil {
		fs.Resumed = true // a second give-up is announced too
	}
	return nil
}

// Queued: a new run with a concurrency key enters its key's queue instead
// of starting (no dispatch is out for it): a debounce run not before
// NotBefore; SubmitSeq is the dispatch stream sequence of a run published
// straight to the stream (0: none). Only a new keyed run (starting, never
// claimed) is queued so.
type Queued struct {
	NotBefore time.Time
	SubmitSeq uint64
}

func (ev Queued) apply(r *Row, now time.Time) error {
	if r.Status != events.StatusStarting || r.Attempt != 0 || r.ConcurrencyKey == "" {
		return refuse(ev, r, ErrNotAllowed)
	}
	r.enter(events.StatusQueued, now)
	r.Unindexed = false // a keyed run is swept: its key is advanced
	r.NotBefore = ev.NotBefore
	if ev.SubmitSeq != 0 {
		r.SubmitSeq = ev.SubmitSeq
	}
	return nil
}

// Promoted: the queued run took its key and starts (its budgets count
// from now, not from its wait in the queue). A merge run carries the runs
// Merged (their inputs and its own in Input); DispatchSeq, when not 0, is
// the dispatch its promoter holds. ErrNoChange for a run not queued.
type Promoted struct {
	Merged      []string
	Input       json.RawMessage
	DispatchSeq uint64
}

func (ev Promoted) apply(r *Row, now time.Time) error {
	if r.Status != events.StatusQueued {
		return ErrNoChange
	}
	r.enter(events.StatusStarting, now)
	if r.Strategy == events.StrategyMerge {
		r.Merged, r.Input = ev.Merged, ev.Input
	}
	if ev.DispatchSeq != 0 {
		r.DispatchSeq = ev.DispatchSeq
	}
	return nil
}

// Superseded: the queued run is replaced by the newer run By (aborted,
// reason superseded). ErrNoChange for a run not queued.
type Superseded struct{ By string }

func (ev Superseded) apply(r *Row, now time.Time) error {
	if r.Status != events.StatusQueued {
		return ErrNoChange
	}
	r.SupersededBy = ev.By
	r.end(events.StatusAborted, events.ReasonSuperseded, "superseded by run "+ev.By, now)
	return nil
}

// Merged: the queued run's input is carried by run Into (aborted, reason
// merged). ErrNoChange for a run not queued.
type Merged struct{ Into string }

func (ev Merged) apply(r *Row, now time.Time) error {
	if r.Status != events.StatusQueued {
		return ErrNoChange
	}
	r.MergedInto = ev.Into
	r.end(events.StatusAborted, events.ReasonMerged, "merged into run "+ev.Into, now)
	return nil
}

// DispatchRecorded: the run's dispatch was published at stream sequence
// Seq. With Replace it replaces the one recorded on a run still waiting
// for a worker (starting) whose dispatch was lost; without, it is recorded
// only where none is known yet (DispatchSeq 0). ErrNoChange otherwise, and
// for a final run.
type DispatchRecorded struct {
	Seq     uint64
	Replace bool
}

func (ev DispatchRecorded) apply(r *Row, _ time.Time) error {
	switch {
	case r.Status.Final():
		return ErrNoChange
	case ev.Replace && (r.Status != events.StatusStarting || r.DispatchSeq == ev.Seq):
		return ErrNoChange
	case !ev.Replace && r.DispatchSeq != 0:
		return ErrNoChange
	}
	r.DispatchSeq = ev.Seq
	return nil
}

// Redispatched: the run's dispatch at stream sequence Lost was lost and a
// copy was published at Seq (one more redispatch). ErrNoChange when the
// row no longer records Lost (claimed or re-dispatched meanwhile), or the
// run is final.
type Redispatched struct {
	Lost uint64
	Seq  uint64
}

func (ev Redispatched) apply(r *Row, _ time.Time) error {
	if r.Status.Final() || r.DispatchSeq != ev.Lost {
		return ErrNoChange
	}
	r.Redispatches++
	r.DispatchSeq = ev.Seq
	return nil
}

// WaitingForWorker marks a run waiting for a worker (starting) whose
// dispatch no worker takes, with why (reason waiting-for-worker); a claim
// clears it. ErrNoChange for a run not starting, or marked so already.
type WaitingForWorker struct{ Why string }

func (ev WaitingForWorker) apply(r *Row, _ time.Time) error {
	if r.Status != events.StatusStarting || (r.Reason == events.ReasonWaitingForWorker && r.Error == ev.Why) {
		return ErrNoChange
	}
	r.Reason, r.Error = events.ReasonWaitingForWorker, ev.Why
	return nil
}

// Waiting: the handler of the attempt By waits for Name ("" : its wait
// ended). A wait that ends restarts the no-progress clock, if armed: the
// wait was not silence, and its end is where silence may begin.
// ErrNoChange when the row shows that wait already.
type Waiting struct {
	By   Holder
	Name string
}

func (ev Waiting) apply(r *Row, now time.Time) error {
	if !ev.By.holds(r) {
		return refuse(ev, r, ErrNotHolder)
	}
	if r.WaitingFor == ev.Name {
		return ErrNoChange
	}
	r.setWaiting(ev.Name, now)
	return nil
}

// setWaiting records what r's handler waits for ("" for nothing); the end
// of a wait restarts the no-progress clock.
func (r *Row) setWaiting(name string, now time.Time) {
	if r.WaitingFor != "" && name == "" {
		r.restartNoProgress(now)
	}
	r.WaitingFor = name
}

// Synced is the attempt By's row sync: what its handler did since the
// last one, cumulative (applied twice it changes nothing more). Counters
// and signs of life only move forward; Progress (when set) is the newest
// snapshot; WaitingFor is the handler's wait now (see Waiting);
// SignalsSeen the last signal received per name. Usage and StepUsage,
// when set, are the run's usage and the part of it its stored steps spent;
// with ChargeSteps (the top of a tree without a budget) the steps' usage
// not counted yet is also added to the run's own tree totals.
type Synced struct {
	By            Holder
	Progress      *jetruntype.ProgressSnapshot
	LastSignalAt  time.Time
	Chunks        int64
	Milestones    int
	LastMilestone string
	WaitingFor    string
	SignalsSeen   map[string]uint64
	FirstEventSeq uint64
	Usage         *jetruntype.Usage
	StepUsage     *jetruntype.Usage
	ChargeSteps   bool
}

func (ev Synced) apply(r *Row, now time.Time) error {
	if !ev.By.holds(r) {
		return refuse(ev, r, ErrNotHolder)
	}
	if ev.Milestones >= r.Milestones && ev.LastMilestone != "" {
		r.LastMilestone = ev.LastMilestone
	}
	r.setWaiting(ev.WaitingFor, now)
	for name, seq := range ev.SignalsSeen {
		if r.SignalsSeen == nil {
			r.SignalsSeen = make(map[string]uint64)
		}
		r.SignalsSeen[name] = max(r.SignalsSeen[name], seq)
	}
	if ev.Progress != nil {
		p := *ev.Progress
		r.Progress = &p
	}
	if ev.LastSignalAt.After(r.LastSignalAt) {
		r.LastSignalAt = ev.LastSignalAt
	}
	r.Chunks = max(r.Chunks, ev.Chunks)
	r.Milestones = max(r.Milestones, ev.Milestones)
	if r.FirstEventSeq == 0 {
		r.FirstEventSeq = ev.FirstEventSeq
	}
	if ev.Usage != nil {
		u := CloneUsage(ev.Usage)
		r.Usage = u
	}
	if ev.StepUsage != nil {
		var had jetruntype.Usage
		if r.StepUsage != nil {
			had = *r.StepUsage
		}
		if d := MinusUsage(*ev.StepUsage, had); ev.ChargeSteps && !IsZeroTotals(d.UsageTotals) {
			r.charge(d.UsageTotals) // no budget: never an overrun
		}
		r.StepUsage = CloneUsage(ev.StepUsage)
	}
	return nil
}

// FinalRepaired restores a final row's ending from Event, the run's first
// final status event, when the row says otherwise (someone rewrote it
// without the compare-and-set, see engine.Runtime.RepairFinal): status,
// reason, error, attempt and finishedAt come back from the event, the
// holder is released. ErrNoChange when the row agrees with the event.
// It is the one event that may leave a final status, written with
// runstore.Store.RewriteFinal.
type FinalRepaired struct{ Event events.StatusEvent }

func (ev FinalRepaired) apply(r *Row, now time.Time) error {
	e := ev.Event
	if !e.Status.Final() {
		return refuse(ev, r, ErrNotAllowed)
	}
	if r.Status == e.Status && r.Reason == e.Reason && r.Error == e.Error && r.Attempt == e.Attempt {
		return ErrNoChange
	}
	r.enter(e.Status, now)
	r.Reason, r.Error = e.Reason, e.Error
	r.Attempt, r.FinishedAt = e.Attempt, e.At
	return nil
}
