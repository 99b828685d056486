package model

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// ErrNoChange may be returned by a function that changes a row (a
// transition, a ledger entry, or a kv.Store.Mutate function) to say there
// is nothing to change: the row stays as it is.
var ErrNoChange = errors.New("no change")

// End moves r to a final status, releases its lease and, for a detached run
// with a finish handler, records that a finish is owed for the status.
// Callers check that r is not final already.
func (r *Row) End(status events.Status, reason, text string, now time.Time) {
	r.Status, r.Reason, r.Error = status, reason, text
	r.Retryable, r.ChildStillRunning = false, false
	r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
	r.FinishedAt = now
	r.oweFinish(status, now)
}

// Interrupt gives r up (soft): status interrupted with reason, retryable,
// and a finish owed for "interrupted". childStillRunning says whether a
// worker may still be executing it; if not, its lease is released.
func (r *Row) Interrupt(reason, text string, childStillRunning bool, now time.Time) {
	r.Status, r.Reason, r.Error = events.StatusInterrupted, reason, text
	r.Retryable, r.ChildStillRunning = true, childStillRunning
	if !childStillRunning {
		r.ChildStopped()
	}
	r.FinishedAt = now
	r.oweFinish(events.StatusInterrupted, now)
}

// GiveUp interrupts r (Interrupt) for a budget or a caller's window and
// asks the worker executing it, if any, to stop its child: a teardown,
// not a cancel (Teardown), so the run's descendants are left as they are
// (CancelCascades). A cancel requested before stays a cancel.
func (r *Row) GiveUp(reason, text string, childStillRunning bool, now time.Time) {
	r.Interrupt(reason, text, childStillRunning, now)
	r.askStop(reason)
}

// askStop records a give-up's request that r's child stop, unless a
// cancel is requested already.
func (r *Row) askStop(reason string) {
	if !r.CancelRequested {
		r.CancelRequested, r.CancelReason, r.Teardown = true, reason, true
	}
}

// CancelCascades reports whether r was cancelled, so that its live
// descendants are cancelled too: aborted, or its cancel requested. A
// give-up's teardown (GiveUp, StopForBudget) is not a cancel.
func (r *Row) CancelCascades() bool {
	return r.Status == events.StatusAborted || (r.CancelRequested && !r.Teardown)
}

// CancelledAttempt returns the attempt of worker that r asks to stop: r
// is live, its cancel (or a give-up's teardown) is requested and worker
// holds it; 0 if none. A cancel event is acted on only for it.
func (r *Row) CancelledAttempt(worker string) int {
	if !r.CancelRequested || !r.Live() || r.Worker != worker {
		return 0
	}
	return r.Attempt
}

// CancelEvent is the event that tells the worker holding r of its
// requested cancel: it names the attempt it is for.
func (r *Row) CancelEvent(now time.Time) events.CancelEvent {
	return events.CancelEvent{RunID: r.ID, Reason: r.CancelReason, Attempt: r.Attempt, At: now}
}

// Resume moves an interrupted run whose child stopped back to "starting",
// for a new attempt that keeps its milestones, counters and finish ledger;
// the give-up's finish slot is marked so that a later give-up takes it
// over and is announced as well (oweFinish).
// Its budgets start again, from now (ReadyAt) until the new attempt
// starts, and so does the count of its lost dispatches; the attempt given
// up is a hand-off, not counted against the attempts limit (HandOff: once,
// and only if an attempt ran since the last one counted, so resumes with
// no attempt between them do not widen the limit).
func (r *Row) Resume(now time.Time) {
	r.Status = events.StatusStarting
	r.Reason, r.Error, r.Retryable, r.ChildStillRunning = "", "", false, false
	r.CancelRequested, r.CancelReason, r.Teardown = false, "", false
	r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
	r.StartedAt, r.LastSignalAt, r.FinishedAt = time.Time{}, time.Time{}, time.Time{}
	r.WaitingFor = ""
	r.DispatchSeq, r.Redispatches = 0, 0
	r.ReadyAt = now
	r.HandOff()
	if fs := r.Finishes[events.StatusInterrupted]; fs != nil {
		fs.Resumed = true // a second give-up is announced too
	}
}

// Claim records that worker (its liveness epoch) claims r for a new
// attempt, woken by the dispatch at stream sequence seq. A lost attempt's
// wait is not the new one's (the handler waits again if it does), and the
// no-progress clock, if armed, restarts with the attempt: the time an
// earlier attempt spent waiting, or handed back, is not silence.
func (r *Row) Claim(worker, epoch string, seq uint64, now time.Time) {
	r.Status = events.StatusRunning
	r.Reason, r.Error, r.ChildStillRunning = "", "", false
	r.WaitingFor = ""
	r.Attempt++
	r.Worker, r.WorkerEpoch, r.LeaseUntil = worker, epoch, time.Time{}
	r.DispatchSeq = seq
	if r.StartedAt.IsZero() {
		r.StartedAt = now
	}
	r.restartNoProgress(now)
}

// SetWaiting records what r's handler waits for ("" for nothing). A wait
// that ends restarts the no-progress clock, if armed: the wait was not
// silence, and its end is where silence may begin.
func (r *Row) SetWaiting(name string, now time.Time) {
	if r.WaitingFor != "" && name == "" {
		r.restartNoProgress(now)
	}
	r.WaitingFor = name
}

// restartNoProgress moves the no-progress clock to now, if it is armed
// (r signalled since it became ready).
func (r *Row) restartNoProgress(now time.Time) {
	if !r.LastSignalAt.IsZero() && r.LastSignalAt.Before(now) {
		r.LastSignalAt = now
	}
}

// NoProgressSince returns when r's no-progress clock started, and whether
// it runs: armed by a first signal (LastSignalAt: the last sign of life,
// the start of the attempt, or the end of a wait, whichever is latest),
// and not while the handler waits (WaitingFor).
func (r *Row) NoProgressSince() (time.Time, bool) {
	if r.LastSignalAt.IsZero() || r.WaitingFor != "" {
		return time.Time{}, false
	}
	return r.LastSignalAt, true
}

// WaitingSince returns when r began to wait for a worker: ReadyAt (its
// promotion or resume), or its creation.
func (r *Row) WaitingSince() time.Time {
	if !r.ReadyAt.IsZero() {
		return r.ReadyAt
	}
	return r.CreatedAt
}

// BudgetSince returns when r's absolute budget began: its attempt's
// start, or, while no attempt has started, WaitingSince.
func (r *Row) BudgetSince() time.Time {
	if !r.StartedAt.IsZero() {
		return r.StartedAt
	}
	return r.WaitingSince()
}

// ChildStopped records that no worker executes r any more (after a give-up,
// the child's teardown ended or its worker was lost): its lease is released.
func (r *Row) ChildStopped() {
	r.ChildStillRunning, r.Worker, r.WorkerEpoch, r.LeaseUntil = false, "", "", time.Time{}
}

// Settled reports whether nothing more will happen to r: final (or given up
// with its child stopped), and every finish delivered or given up.
func (r *Row) Settled() bool {
	done := r.Status.Final() || (r.Status == events.StatusInterrupted && !r.ChildStillRunning && r.Worker == "")
	return done && len(r.PendingFinishes()) == 0 && len(r.PendingNotices()) == 0
}

// StatusEvent is the status event announcing r's current status.
func (r *Row) StatusEvent(worker string) events.StatusEvent {
	ev := events.StatusEvent{
		RunID:             r.ID,
		Status:            r.Status,
		Reason:            r.Reason,
		Error:             r.Error,
		Retryable:         r.Status == events.StatusInterrupted,
		ChildStillRunning: r.ChildStillRunning,
		Attempt:           r.Attempt,
		At:                time.Now(),
		AgentType:         r.AgentType,
		Parent:            r.Parent,
		StartedAt:         r.StartedAt,
	}
	if r.Status == events.StatusRunning {
		ev.Worker = worker
	}
	if r.Status.Terminal() {
		ev.Usage = CloneUsage(r.Usage)
	}
	return ev
}

// FinishMessage is the finish owed for status s, if r has a finish handler
// and reached s.
func (r *Row) FinishMessage(s events.Status) (events.Finish, bool) {
	f := r.Finishes[s]
	if f == nil || r.Detached == nil || r.Detached.OnFinish == "" {
		return events.Finish{}, false
	}
	row, err := json.Marshal(r)
	if err != nil {
		return events.Finish{}, false
	}
	msg := events.Finish{
		RunID:             r.ID,
		Handler:           r.Detached.OnFinish,
		Status:            s,
		Reason:            f.Reason,
		Error:             f.Error,
		Retryable:         s == events.StatusInterrupted,
		ChildStillRunning: f.ChildStillRunning,
		Ending:            f.Ending,
		Run:               row,
	}
	if s == events.StatusCompleted {
		msg.Summary, msg.Output = r.Summary, r.Output
	}
	return msg, true
}

// RequestCancel records a cancel on r, as a Mutate function would: it
// returns ErrNoChange when there is nothing to do (r is final, or the cancel
// was already requested). A run no live worker holds (not yet claimed, or
// its holder dead: held is false) is aborted at once (aborted = true:
// announce it); a running one gets cancelRequested, which its worker acts on
// once told (wire.PublishCancel). A run
// already given up (interrupted) stays interrupted: its child, if still
// running, is asked to stop.
//
// A cancel of a run given up is recorded on top of the give-up's teardown
// (Teardown cleared): the run stays interrupted, but it is now cancelled,
// and its descendants with it (CancelCascades).
func (r *Row) RequestCancel(reason string, held bool, now time.Time) (aborted bool, err error) {
	switch {
	case r.Status.Final():
		return false, ErrNoChange
	case r.Status == events.StatusStarting || r.Status == events.StatusQueued || r.Status == events.StatusRunning && !held:
		r.CancelRequested, r.CancelReason, r.Teardown = true, reason, false
		r.End(events.StatusAborted, events.ReasonCancelled, "cancelled: "+reason, now)
		return true, nil
	case r.CancelRequested && !r.Teardown:
		return false, ErrNoChange
	}
	r.CancelRequested, r.CancelReason, r.Teardown = true, reason, false
	return false, nil
}

// NewRun is the row of a run about to start: status "starting", from its
// dispatch d (whose RunID is set) published at dispatch stream sequence seq.
func NewRun(agentType string, d events.Dispatch, seq uint64, now time.Time) *jetruntype.Run {
	return &jetruntype.Run{
		ID:               d.RunID,
		AgentType:        agentType,
		Parent:           d.Parent,
		ParentToolCallID: d.ParentToolCallID,
		DisplayOrder:     d.DisplayOrder,
		Depth:            d.Depth,
		Input:            d.Input,
		Detached:         d.Detached,
		TraceParent:      d.TraceParent,
		TraceState:       d.TraceState,
		Status:           events.StatusStarting,
		DispatchSeq:      seq,
		CreatedAt:        now,
		ConcurrencyKey:   d.ConcurrencyKey,
		Strategy:         d.Strategy,
		DebounceMs:       d.DebounceMs,
		Budget:           d.Budget,
		Root:             d.Root,
		BudgetFrom:       d.BudgetFrom,
	}
}

// Dispatch is the dispatch message that (re)starts r.
func (r *Row) Dispatch() events.Dispatch {
	return events.Dispatch{
		RunID:            r.ID,
		Input:            r.Input,
		Parent:           r.Parent,
		ParentToolCallID: r.ParentToolCallID,
		DisplayOrder:     r.DisplayOrder,
		Depth:            r.Depth,
		Detached:         r.Detached,
		TraceParent:      r.TraceParent,
		TraceState:       r.TraceState,
		ConcurrencyKey:   r.ConcurrencyKey,
		Strategy:         r.Strategy,
		DebounceMs:       r.DebounceMs,
		Budget:           r.Budget,
		Root:             r.Root,
		BudgetFrom:       r.BudgetFrom,
	}
}

// DispatchMsgID is the Nats-Msg-Id r's current dispatch is published
// under, by whoever (re)starts it and by the reconciler when that writer
// died before publishing: "<id>.key.<readyAt>" for a run started by its
// concurrency key, "<id>.resume.<readyAt>" for a run resumed after a
// give-up, its id otherwise (readyAt in Unix nanoseconds: one per
// promotion or resume, even with no attempt between two). A copy that
// landed is then found by the dedup window, not confused with an earlier
// dispatch of the run that a worker already took.
func (r *Row) DispatchMsgID() string {
	ready := "." + strconv.FormatInt(r.ReadyAt.UnixNano(), 10)
	switch {
	case r.ConcurrencyKey != "" && !r.ReadyAt.IsZero():
		return r.ID + ".key" + ready
	case r.ConcurrencyKey != "":
		return r.ID + ".key"
	case !r.ReadyAt.IsZero():
		return r.ID + ".resume" + ready
	}
	return r.ID
}

// RedispatchMsgID is the Nats-Msg-Id of the n-th re-publish of r's lost
// dispatch: DispatchMsgID + ".redispatch.<n>", so a resumed run, whose
// count starts again, does not reuse an earlier life's.
func (r *Row) RedispatchMsgID(n int) string {
	return r.DispatchMsgID() + ".redispatch." + strconv.Itoa(n)
}

// Trace is r's trace context (zero if it has none).
func (r *Row) Trace() events.TraceContext {
	return events.TraceContext{TraceParent: r.TraceParent, TraceState: r.TraceState}.Valid()
}
