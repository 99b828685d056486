package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jsfault"
)

// FinishState is the delivery ledger of one status's finish: one slot per
// status, so a give-up (interrupted) and a later real result are both
// delivered, each at most once on the happy path.
type FinishState struct {
	// DueAt is when the transition made the finish owed.
	DueAt time.Time `json:"dueAt"`
	// The outcome as it was at the transition (the row may move on).
	Reason            string `json:"reason,omitempty"`
	Error             string `json:"error,omitempty"`
	ChildStillRunning bool   `json:"childStillRunning,omitempty"`
	// Attempts counts handler invocations.
	Attempts int `json:"attempts,omitempty"`
	// ClaimedBy and ClaimedUntil: the deliverer invoking the handler now.
	ClaimedBy    string    `json:"claimedBy,omitempty"`
	ClaimedUntil time.Time `json:"claimedUntil,omitzero"`
	LastError    string    `json:"lastError,omitempty"`
	// FailedAt is set when delivery was given up and the finish
	// dead-lettered.
	FailedAt time.Time `json:"failedAt,omitzero"`
	// Seq is the finish stream sequence of the copy the reconciler last
	// found or published: while it is still in the stream no other copy
	// is published, so one copy per run and status waits for a deliverer.
	Seq uint64 `json:"seq,omitempty"`
	// UnservedSince is set by the reconciler when no deliverer has taken
	// the finish for a while and none follows its handler: the handler has
	// not been seen. A deliverer's claim clears it.
	UnservedSince time.Time `json:"unservedSince,omitzero"`
}

// End moves r to a final status, releases its lease and, for a detached run
// with a finish handler, records that a finish is owed for the status.
// Callers check that r is not final already.
func (r *Run) End(status events.Status, reason, text string, now time.Time) {
	r.Status, r.Reason, r.Error = status, reason, text
	r.Retryable, r.ChildStillRunning = false, false
	r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
	r.FinishedAt = now
	r.oweFinish(status, now)
}

// Interrupt gives r up (soft): status interrupted with reason, retryable,
// and a finish owed for "interrupted". childStillRunning says whether a
// worker may still be executing it; if not, its lease is released.
func (r *Run) Interrupt(reason, text string, childStillRunning bool, now time.Time) {
	r.Status, r.Reason, r.Error = events.StatusInterrupted, reason, text
	r.Retryable, r.ChildStillRunning = true, childStillRunning
	if !childStillRunning {
		r.ChildStopped()
	}
	r.FinishedAt = now
	r.oweFinish(events.StatusInterrupted, now)
}

// Resume moves an interrupted run whose child stopped back to "starting",
// for a new attempt that keeps its milestones, counters and finish ledger.
// Its budgets start again; the resume does not count against the attempts
// limit (like a hand-back).
func (r *Run) Resume() {
	r.Status = events.StatusStarting
	r.Reason, r.Error, r.Retryable, r.ChildStillRunning = "", "", false, false
	r.CancelRequested, r.CancelReason = false, ""
	r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
	r.StartedAt, r.LastSignalAt, r.FinishedAt = time.Time{}, time.Time{}, time.Time{}
	r.WaitingFor = ""
	r.DispatchSeq = 0
	r.Handoffs++
}

// ChildStopped records that no worker executes r any more (after a give-up,
// the child's teardown ended or its worker was lost): its lease is released.
func (r *Run) ChildStopped() {
	r.ChildStillRunning, r.Worker, r.WorkerEpoch, r.LeaseUntil = false, "", "", time.Time{}
}

func (r *Run) oweFinish(s events.Status, now time.Time) {
	if r.Detached == nil || r.Detached.OnFinish == "" {
		return
	}
	if _, used := r.Finishes[s]; used {
		return // one slot per status
	}
	if r.Finishes == nil {
		r.Finishes = make(map[events.Status]*FinishState)
	}
	r.Finishes[s] = &FinishState{DueAt: now, Reason: r.Reason, Error: r.Error, ChildStillRunning: r.ChildStillRunning}
}

// FinishOwed reports whether the finish for s is due and neither delivered
// nor given up.
func (r *Run) FinishOwed(s events.Status) bool {
	f := r.Finishes[s]
	if f == nil || !f.FailedAt.IsZero() {
		return false
	}
	_, delivered := r.Delivered[s]
	return !delivered
}

// PendingFinishes returns the statuses whose finish is owed, oldest first.
func (r *Run) PendingFinishes() []events.Status {
	var out []events.Status
	for s := range r.Finishes {
		if r.FinishOwed(s) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b events.Status) int { return r.Finishes[a].DueAt.Compare(r.Finishes[b].DueAt) })
	return out
}

// Settled reports whether nothing more will happen to r: final (or given up
// with its child stopped), and every finish delivered or given up.
func (r *Run) Settled() bool {
	done := r.Status.Final() || (r.Status == events.StatusInterrupted && !r.ChildStillRunning && r.Worker == "")
	return done && len(r.PendingFinishes()) == 0 && len(r.PendingNotices()) == 0
}

// Live reports whether r may still be executing: starting, running, or
// interrupted with its child still running.
func (r *Run) Live() bool {
	return r.Status == events.StatusStarting || r.Status == events.StatusRunning ||
		(r.Status == events.StatusInterrupted && r.ChildStillRunning)
}

// StatusEvent is the status event announcing r's current status.
func (r *Run) StatusEvent(worker string) events.StatusEvent {
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
	return ev
}

// FinishMessage is the finish owed for status s, if r has a finish handler
// and reached s.
func (r *Run) FinishMessage(s events.Status) (events.Finish, bool) {
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
		Run:               row,
	}
	if s == events.StatusCompleted {
		msg.Summary, msg.Output = r.Summary, r.Output
	}
	return msg, true
}

// PublishTransition announces r's current status: the status event on
// jetrun.run.<id>.status, with a Nats-Msg-Id, so announcing twice (a retry,
// a repair) stores it once within the dedup window. When the run owes a
// finish for the status, the event carries the header Jetrun-Finish-Owed
// and the finisher (pkg/finish, run by every parent-worker) publishes the
// finish: whoever makes the transition (a child-worker, a parent client,
// the reconciler) never publishes to jetrun.finish.>, so a child-worker
// needs no permission on finishes. The reconciler republishes a finish the
// finisher missed.
//
// Transient faults are retried (jsfault.Retry) for at most TransitionRetry.
func PublishTransition(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *Run, worker string) error {
	return jsfault.Retry(ctx, TransitionRetry, func(ctx context.Context) error {
		return PublishStatus(ctx, js, ns, r, worker, events.StatusMsgID(r.ID, r.Attempt, r.Status))
	})
}

// TransitionRetry bounds the retries of PublishTransition.
const TransitionRetry = 10 * time.Second

// PublishStatus publishes the status event of r's current status with the
// given Nats-Msg-Id.
func PublishStatus(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *Run, worker, msgID string) error {
	data, err := json.Marshal(r.StatusEvent(worker))
	if err != nil {
		return fmt.Errorf("kv: encode status event of run %s: %w", r.ID, err)
	}
	msg := &nats.Msg{Subject: ns.RunSubject(r.ID, events.KindStatus), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	msg.Header.Set(events.HeaderAttempt, strconv.Itoa(r.Attempt))
	if r.FinishOwed(r.Status) {
		msg.Header.Set(events.HeaderFinishOwed, string(r.Status))
	}
	r.Trace().SetHeaders(msg.Header)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("kv: publish %s status of run %s: %w", r.Status, r.ID, err)
	}
	return nil
}

// PublishFinish publishes the finish of r for status s, deduplicated by
// Nats-Msg-Id <runId>.<status>.
func PublishFinish(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *Run, s events.Status) error {
	_, err := PublishFinishAck(ctx, js, ns, r, s)
	return err
}

// PublishFinishAck is PublishFinish returning the stream's answer (nil if r
// owes no finish for s): within the dedup window a copy already stored
// answers Duplicate with that copy's sequence.
func PublishFinishAck(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *Run, s events.Status) (*jetstream.PubAck, error) {
	f, ok := r.FinishMessage(s)
	if !ok {
		return nil, nil
	}
	data, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("kv: encode finish of run %s: %w", r.ID, err)
	}
	msg := &nats.Msg{Subject: ns.FinishSubject(f.Handler), Data: data, Header: nats.Header{}}
	r.Trace().SetHeaders(msg.Header)
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(events.FinishMsgID(r.ID, s)))
	if err != nil {
		return nil, fmt.Errorf("kv: publish %s finish of run %s: %w", s, r.ID, err)
	}
	return ack, nil
}

// RequestCancel records a cancel on r, as a Mutate function would: it
// returns ErrNoChange when there is nothing to do (r is final, or the cancel
// was already requested). A run no live worker holds (not yet claimed, or
// its holder dead: held is false) is aborted at once (aborted = true:
// announce it); a running one gets cancelRequested, which its worker acts on
// once told (events.PublishCancel). A run
// already given up (interrupted) stays interrupted: its child, if still
// running, is asked to stop.
func (r *Run) RequestCancel(reason string, held bool, now time.Time) (aborted bool, err error) {
	switch {
	case r.Status.Final():
		return false, ErrNoChange
	case r.Status == events.StatusStarting || r.Status == events.StatusQueued || r.Status == events.StatusRunning && !held:
		r.CancelRequested, r.CancelReason = true, reason
		r.End(events.StatusAborted, events.ReasonCancelled, "cancelled: "+reason, now)
		return true, nil
	case r.CancelRequested:
		return false, ErrNoChange
	}
	r.CancelRequested, r.CancelReason = true, reason
	return false, nil
}

// NewRun is the row of a run about to start: status "starting", from its
// dispatch d (whose RunID is set) published at dispatch stream sequence seq.
func NewRun(agentType string, d events.Dispatch, seq uint64, now time.Time) *Run {
	return &Run{
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
	}
}

// Dispatch is the dispatch message that (re)starts r.
func (r *Run) Dispatch() events.Dispatch {
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
	}
}

// Trace is r's trace context (zero if it has none).
func (r *Run) Trace() events.TraceContext {
	return events.TraceContext{TraceParent: r.TraceParent, TraceState: r.TraceState}.Valid()
}
