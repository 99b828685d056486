package model

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// ErrNoChange may be returned by a function that changes a row (a
// transition, a ledger entry, or a kv.Store.Mutate function) to say there
// is nothing to change: the row stays as it is.
var ErrNoChange = errors.New("no change")

// askStop records a give-up's request that r's child stop (a teardown,
// see Teardown), unless a cancel is requested already.
func (r *Row) askStop(reason string) {
	if !r.CancelRequested {
		r.CancelRequested, r.CancelReason, r.Teardown = true, reason, true
	}
}

// CancelCascades reports whether r was cancelled, so that its live
// descendants are cancelled too: aborted, or its cancel requested. A
// give-up's teardown (GaveUp, BudgetStopped) is not a cancel.
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

// NewRun is the row of a run about to start: status "starting", from its
// dispatch d (whose RunID is set) published at dispatch stream sequence seq.
func NewRun(agentType string, d events.Dispatch, seq uint64, now time.Time) *Row {
	return &Row{
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
		Session:          d.Session,
		Tenant:           d.Tenant,
	}
}

// NewUnindexedRun is NewRun for a run that needs nothing of the
// reconciler (a top-level run that is not detached): it is kept out of the
// active-run index (Unindexed), sparing its two writes.
func NewUnindexedRun(agentType string, d events.Dispatch, seq uint64, now time.Time) *Row {
	r := NewRun(agentType, d, seq, now)
	r.Unindexed = true
	return r
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
		Tenant:           r.Tenant,
		Root:             r.Root,
		BudgetFrom:       r.BudgetFrom,
		Session:          r.Session,
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
