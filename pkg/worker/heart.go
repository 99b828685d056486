package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
)

// syncParallelism bounds the row syncs one heartbeat runs at once.
const syncParallelism = 16

// heart is the worker's one bookkeeping goroutine for every run it holds,
// so what a waiting run costs is memory, not writes or goroutines. Every
// tick it
//   - renews the worker's liveness key every third of a lease: one stored
//     write keeps every run of the worker held (kv.Liveness);
//   - sends InProgress on each held dispatch every third of a lease (not
//     stored), so the server redelivers it only when the worker is gone;
//   - writes the rows of runs with changes pending (progress snapshot,
//     signal time, counters), each at most every RowSyncInterval;
//   - ends the attempt of a handler that ignored the end of its context for
//     a whole lease, so a stuck handler cannot pin a cancelled run.
func (w *Worker) heart(ctx context.Context) {
	renewEvery := w.cfg.Lease / 3
	tick := time.NewTicker(min(w.cfg.RowSyncInterval, renewEvery))
	defer tick.Stop()
	nextRenew := time.Now().Add(renewEvery)
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if !now.Before(nextRenew) {
				if err := w.renew(ctx); err != nil {
					if !failing {
						w.log.WarnContext(ctx, "renew worker liveness; retrying", "err", err)
					}
					failing = true
					nextRenew = now.Add(min(renewEvery, time.Second))
				} else {
					if failing {
						w.log.InfoContext(ctx, "worker liveness renewed again")
					}
					failing = false
					nextRenew = now.Add(renewEvery)
				}
			}
			w.tend(ctx, now, renewEvery)
		}
	}
}

// renew renews the liveness key. When the key is lost (it expired during a
// partition, or another process took the id), or cannot be renewed before
// it would expire, every run of the worker may belong to another worker
// soon: their attempts stop, and the worker starts a new epoch.
func (w *Worker) renew(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, w.cfg.Lease/3)
	defer cancel()
	live := w.liveness()
	err := live.Renew(rctx)
	if err == nil {
		w.renewed(time.Now())
		return nil
	}
	if !errors.Is(err, kv.ErrLivenessLost) && time.Now().Before(w.holdsUntil()) {
		w.ensureAside(ctx, err)
		return err
	}
	w.log.ErrorContext(ctx, "worker liveness lost: stopping every attempt of this worker", "err", err)
	w.loseAll()
	next, aerr := w.store.AcquireLiveness(rctx, w.cfg.ID, w.cfg.Lease)
	if aerr != nil {
		return errors.Join(err, aerr)
	}
	w.mu.Lock()
	w.live = next
	w.mu.Unlock()
	w.renewed(time.Now())
	return nil
}

// renewed records a successful renewal at t.
func (w *Worker) renewed(t time.Time) {
	w.liveUntil.Store(t.Add(w.cfg.Lease - w.cfg.Lease/6).UnixNano())
}

// holdsUntil is when the worker stops counting on holding its runs unless
// it renews its liveness: a little before its key would expire.
func (w *Worker) holdsUntil() time.Time { return time.Unix(0, w.liveUntil.Load()) }

func (w *Worker) liveness() *kv.Liveness {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live
}

// loseAll stops every attempt of the worker (ErrLeaseLost).
func (w *Worker) loseAll() {
	for _, e := range w.executions() {
		if e.started() {
			e.lose()
		}
	}
}

func (w *Worker) executions() []*execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*execution, 0, len(w.active))
	for _, e := range w.active {
		out = append(out, e)
	}
	return out
}

// tend does one heartbeat's work on every run.
func (w *Worker) tend(ctx context.Context, now time.Time, beatEvery time.Duration) {
	sem := make(chan struct{}, syncParallelism)
	var syncs sync.WaitGroup
	for _, e := range w.executions() {
		beat, stuck, sync := e.due(now, beatEvery, w.cfg.Lease, w.cfg.RowSyncInterval)
		if beat {
			e.heartbeat()
		}
		if stuck {
			e.log.ErrorContext(ctx, "handler ignored the end of its context for a lease; ending its attempt",
				"cause", context.Cause(e.handlerContext()))
			go e.end(e.forceOutcome)
			continue
		}
		if sync {
			sem <- struct{}{}
			syncs.Go(func() {
				defer func() { <-sem }()
				e.sync(ctx)
			})
		}
	}
	syncs.Wait()
}

// due says what the heartbeat at now owes e: an InProgress on its dispatch,
// giving up a stuck handler, a row sync.
func (e *execution) due(now time.Time, beatEvery, lease, syncEvery time.Duration) (beat, stuck, sync bool) {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	if !e.begun || e.ended {
		return false, false, false
	}
	if now.Sub(e.lastBeat) >= beatEvery {
		beat, e.lastBeat = true, now
	}
	if e.ctx.Err() != nil {
		if e.stoppedAt.IsZero() {
			e.stoppedAt = now
		} else if now.Sub(e.stoppedAt) > lease {
			return beat, true, false
		}
	}
	if now.Sub(e.lastSync) >= syncEvery && e.isDirty() {
		sync, e.lastSync = true, now
	}
	return beat, false, sync
}

// started reports whether the handler's context exists (the run is
// claimed and its attempt began).
func (e *execution) started() bool {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	return e.ctx != nil
}

func (e *execution) handlerContext() context.Context {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	return e.ctx
}

// sync writes the pending row fields. The row read on a lost race may
// carry a cancel request: it is acted on.
func (e *execution) sync(ctx context.Context) {
	if e.pub.isFenced() {
		return
	}
	row, err := e.write(ctx, func(r *kv.Run) error {
		if err := e.owned(r); err != nil {
			return err
		}
		e.applyState(r)
		return nil
	})
	switch {
	case errors.Is(err, ErrLeaseLost):
		e.lose()
	case err != nil:
		e.w.fault(ctx, e.log, "sync run row", err)
	case row.CancelRequested:
		e.requestCancel()
	}
}

// forceOutcome ends the attempt of a handler that will not return: as it
// would have ended had it returned when its context ended.
func (e *execution) forceOutcome() {
	cause := context.Cause(e.handlerContext())
	switch {
	case errors.Is(cause, ErrCancelled):
		e.finalize(events.StatusAborted, events.ReasonCancelled, "", nil)
	case errors.Is(cause, ErrShuttingDown):
		e.handBack()
	default:
		e.abandon()
	}
}
