package worker

import (
	"context"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// lose stops the attempt: no more writes, handler cancelled.
func (e *execution) lose() {
	e.pub.fence()
	e.cancelWith(ErrLeaseLost)
}

// lapse stops the attempt because the worker's liveness lapsed (see
// Worker.lapse): as lose, and abandon hands the run off once the worker is
// back. An execution still being claimed is stopped when execute starts.
func (e *execution) lapse() {
	e.ctlMu.Lock()
	e.lapsed = true
	started := e.cancel != nil // e.pub is set before it
	e.ctlMu.Unlock()
	if started {
		e.lose()
	}
}

func (e *execution) isLapsed() bool {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	return e.lapsed
}

// noteSignal records, for the next row sync, that the run showed signs of
// life, with an optional new progress snapshot.
func (e *execution) noteSignal(at time.Time, snap *jetruntype.ProgressSnapshot) {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	if at.After(e.lastSignalAt) {
		e.lastSignalAt = at
	}
	if snap != nil {
		e.snapshot = snap
	}
	e.dirty = true
}

func (e *execution) isDirty() bool {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	return e.dirty
}

// applyState copies the pending row fields onto r. It is cumulative, hence
// idempotent, as kv.Store.Mutate requires.
func (e *execution) applyState(r *jetruntype.Run) {
	e.emitMu.Lock()
	chunks, milestones, lastName := e.chunkSeq, 0, ""
	if n := len(e.milestones); n > 0 {
		milestones, lastName = e.milestones[n-1].Sequence, e.milestones[n-1].Name
	}
	e.emitMu.Unlock()
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	if milestones >= r.Milestones && lastName != "" {
		r.LastMilestone = lastName
	}
	r.WaitingFor = e.waitingFor
	for name, seq := range e.signalsSeen {
		if r.SignalsSeen == nil {
			r.SignalsSeen = make(map[string]uint64)
		}
		r.SignalsSeen[name] = max(r.SignalsSeen[name], seq)
	}
	if e.snapshot != nil {
		s := *e.snapshot
		r.Progress = &s
	}
	if e.lastSignalAt.After(r.LastSignalAt) {
		r.LastSignalAt = e.lastSignalAt
	}
	r.Chunks = max(r.Chunks, chunks)
	r.Milestones = max(r.Milestones, milestones)
	if r.FirstEventSeq == 0 {
		r.FirstEventSeq = e.firstEventSeq
	}
	e.dirty = false
}

// scheduleFlushLocked arms the timer that publishes the pending coalesced
// progress event when its window ends; emitMu must be held.
func (e *execution) scheduleFlushLocked() {
	due := time.Until(e.lastProgressAt.Add(e.w.cfg.ProgressInterval))
	if e.flushTimer == nil {
		e.flushTimer = time.AfterFunc(due, e.timedFlush)
		return
	}
	e.flushTimer.Reset(due)
}

// timedFlush is the flush timer's function.
func (e *execution) timedFlush() {
	e.ctlMu.Lock()
	ctx := e.ctx
	e.ctlMu.Unlock()
	if err := e.flushProgress(ctx); err != nil && ctx.Err() == nil {
		e.w.fault(ctx, e.log, "flush progress", err)
	}
}

func (e *execution) stopFlushTimer() {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	if e.flushTimer != nil {
		e.flushTimer.Stop()
	}
}

// flushProgress publishes the pending coalesced progress event, if any.
func (e *execution) flushProgress(ctx context.Context) error {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	if e.pending == nil {
		return nil
	}
	p := *e.pending
	e.pending = nil
	return e.publishProgressLocked(ctx, p)
}

// publishProgressLocked publishes p; emitMu must be held.
func (e *execution) publishProgressLocked(ctx context.Context, p events.Progress) error {
	e.progressN++
	p.At = time.Now()
	if _, err := e.pub.publish(ctx, events.KindProgress, events.ProgressMsgID(e.id, e.attempt, e.progressN), p, false); err != nil {
		return err
	}
	e.lastProgressAt = p.At
	return nil
}

func (e *execution) milestonesCopy() []events.Milestone {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	return append([]events.Milestone(nil), e.milestones...)
}
