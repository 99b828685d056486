package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/jsfault"
	"github.com/jetrun/jetrun/pkg/kv"
)

// An attempt that ends without releasing its row — the write that would
// have released it failed while JetStream was away — leaves the row naming
// this worker. Nobody takes a run over from a live worker: the other
// workers hand its redelivered dispatch back (the holder is alive), and
// only this process would claim it again, if a redelivery ever reached it
// (with several workers pulling, one of them can get every redelivery for
// minutes). So the run is left behind here, and the heart releases it once
// JetStream answers: the holder is cleared and the attempt counts as a
// hand-off (a blink if a lapse stopped it), unless the row moved on
// meanwhile (claimed again, taken over, ended, cleared).

// leftover is an attempt whose row may still name this worker.
type leftover struct {
	attempt int
	epoch   string
	blink   bool // stopped by a lapse of the worker's liveness
}

// leaveBehind records that e ended without releasing its row.
func (e *execution) leaveBehind(blink bool) {
	e.w.leaveBehind(e.id, leftover{attempt: e.attempt, epoch: e.epoch, blink: blink})
}

// leaveBehind records that the row of run id may name this worker for
// attempt l.attempt with no execution of it here: an attempt that ended
// without releasing it, or a claim whose write failed without an answer
// (it may have landed).
func (w *Worker) leaveBehind(id string, l leftover) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.leftovers == nil {
		w.leftovers = make(map[string]leftover)
	}
	w.leftovers[id] = l
}

// releaseLeftovers releases the runs left behind, as far as ctx allows;
// the others are tried again at a later beat.
func (w *Worker) releaseLeftovers(ctx context.Context) {
	w.mu.Lock()
	left := make(map[string]leftover, len(w.leftovers))
	for id, l := range w.leftovers {
		left[id] = l
	}
	w.mu.Unlock()
	for id, l := range left {
		if ctx.Err() != nil {
			return
		}
		_, _, err := w.store.Mutate(ctx, id, func(r *jetruntype.Run) error {
			if r.Status.Final() || !r.HeldBy(w.cfg.ID, l.attempt) || r.WorkerEpoch != l.epoch {
				return kv.ErrNoChange
			}
			r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
			if !l.blink || !r.RefundBlink(l.attempt) {
				r.Handoffs++
			}
			return nil
		})
		if err != nil && !errors.Is(err, kv.ErrRunNotFound) && jsfault.IsTransient(ctx, err) {
			continue
		}
		if err != nil && !errors.Is(err, kv.ErrRunNotFound) {
			w.log.WarnContext(ctx, "release a run left behind", "run_id", id, "err", err)
		}
		w.mu.Lock()
		if w.leftovers[id] == l {
			delete(w.leftovers, id)
		}
		w.mu.Unlock()
	}
}
