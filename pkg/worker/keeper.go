package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
)

// keep runs beside the handler until stop is closed (the handler returned).
// It
//   - renews the lease on the row and heartbeats the dispatch (InProgress)
//     every third of a lease, also while a cancelled handler winds down;
//   - writes the progress snapshot, signal time and counters to the row at
//     most every RowSyncInterval;
//   - flushes a coalesced progress event when its window ends;
//   - watches the row, from CancelWatchDelay on, and cancels the handler on a
//     cancel request (ErrCancelled) or when another attempt or a final status
//     appears (ErrLeaseLost);
//   - stops the attempt (ErrLeaseLost) when renewals keep failing and the
//     lease is about to run out: soon the run may belong to another worker;
//   - stops renewing a lease after the handler ignored the end of its
//     context for a whole lease: a stuck handler cannot pin a cancelled run.
func (e *execution) keep(hctx context.Context, stop <-chan struct{}) {
	ctx := context.WithoutCancel(hctx) // renewals outlive the handler's cancellation
	cfg := e.w.cfg
	renewEvery := cfg.Lease / 3
	e.curMu.Lock()
	leaseUntil := e.cur.LeaseUntil
	e.curMu.Unlock()
	nextRenew := time.Now().Add(renewEvery)
	var cancelledAt time.Time // when the handler's context ended

	tick := time.NewTicker(min(cfg.RowSyncInterval, renewEvery))
	defer tick.Stop()
	watchAt := time.NewTimer(cfg.CancelWatchDelay)
	defer watchAt.Stop()
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()

	var updates <-chan kv.Snapshot
	var watch *kv.Watcher
	defer func() {
		if watch != nil {
			watch.Stop()
		}
	}()
	for {
		select {
		case <-stop:
			return

		case now := <-tick.C:
			if e.pub.isFenced() { // the attempt was lost: nothing to renew
				continue
			}
			if hctx.Err() != nil {
				if cancelledAt.IsZero() {
					cancelledAt = now
				} else if now.Sub(cancelledAt) > cfg.Lease {
					e.log.ErrorContext(ctx, "handler ignored the end of its context for a lease; giving the run up",
						"cause", context.Cause(hctx))
					e.lose()
					continue
				}
			}
			renew := !now.Before(nextRenew)
			if !renew && !e.isDirty() {
				continue
			}
			row, err := e.write(ctx, func(r *kv.Run) error {
				if err := e.owned(r); err != nil {
					return err
				}
				e.applyState(r)
				r.LeaseUntil = now.Add(cfg.Lease)
				return nil
			})
			switch {
			case err == nil:
				leaseUntil, nextRenew = row.LeaseUntil, now.Add(renewEvery)
				e.heartbeat()
				if row.CancelRequested {
					e.cancel(ErrCancelled)
				}
			case errors.Is(err, ErrLeaseLost):
				e.lose()
			default:
				e.log.WarnContext(ctx, "renew lease", "err", err)
				if time.Now().After(leaseUntil.Add(-renewEvery)) {
					e.log.ErrorContext(ctx, "lease about to expire and cannot be renewed; stopping the attempt")
					e.lose()
				}
			}

		case <-watchAt.C:
			w, err := e.w.store.Watch(ctx, e.id)
			if err != nil {
				e.log.WarnContext(ctx, "watch run row for cancel", "err", err)
				watchAt.Reset(time.Second)
				continue
			}
			watch, updates = w, w.Updates()

		case s := <-updates:
			e.observe(s)

		case <-e.kick:
			if due := e.progressDue(); !due.IsZero() {
				flush.Reset(time.Until(due))
			}
		case <-flush.C:
			if err := e.flushProgress(hctx); err != nil && hctx.Err() == nil {
				e.log.WarnContext(ctx, "flush progress", "err", err)
			}
		}
	}
}

// observe reacts to a row change seen by the watch.
func (e *execution) observe(s kv.Snapshot) {
	switch {
	case s.Deleted:
		e.lose() // cleared
	case e.owned(s.Run) != nil:
		e.lose()
	default:
		e.curMu.Lock()
		if s.Revision > e.rev {
			e.cur, e.rev = s.Run, s.Revision
		}
		e.curMu.Unlock()
		if s.Run.CancelRequested {
			e.cancel(ErrCancelled)
		}
	}
}

// lose stops the attempt: no more writes, handler cancelled.
func (e *execution) lose() {
	e.pub.fence()
	e.cancel(ErrLeaseLost)
}

// noteSignal records, for the next row sync, that the run showed signs of
// life, with an optional new progress snapshot.
func (e *execution) noteSignal(at time.Time, snap *kv.ProgressSnapshot) {
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
func (e *execution) applyState(r *kv.Run) {
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

// progressDue is when the pending coalesced progress event must go out, or
// zero if none is pending.
func (e *execution) progressDue() time.Time {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	if e.pending == nil {
		return time.Time{}
	}
	return e.lastProgressAt.Add(e.w.cfg.ProgressInterval)
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
	if _, err := e.pub.publish(ctx, events.KindProgress, events.ProgressMsgID(e.id, e.attempt, e.progressN), p); err != nil {
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
