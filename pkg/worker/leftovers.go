package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
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
	attempt   int
	epoch     string
	blink     bool // stopped by a lapse of the worker's liveness
	releasing bool // the heart is writing its row: the run is not claimed here meanwhile (register)
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
//
// A release and a claim of the same run in this process exclude each other
// (leftover.releasing, register): a claim whose write failed without an answer
// may not have landed, and a later claim here can then write the very
// attempt it names.
func (w *Worker) releaseLeftovers(ctx context.Context) {
	w.mu.Lock()
	ids := make([]string, 0, len(w.leftovers))
	for id := range w.leftovers {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		w.releaseLeftover(ctx, id)
	}
}

// releaseLeftover releases the row of run id if it is still left behind.
func (w *Worker) releaseLeftover(ctx context.Context, id string) {
	w.mu.Lock()
	l, ok := w.leftovers[id]
	if !ok || w.active[id] != nil {
		// Gone (claimed again here: register drops it), or the attempt
		// that left it has not quite finished ending: at a later beat.
		w.mu.Unlock()
		return
	}
	l.releasing = true
	w.leftovers[id] = l
	w.mu.Unlock()
	by := model.Holder{Worker: w.cfg.ID, Epoch: l.epoch, Attempt: l.attempt}
	var ev model.Event = model.HandedBack{By: by}
	if l.blink {
		ev = model.Lapsed{By: by}
	}
	now := time.Now()
	_, _, err := w.store.Mutate(ctx, id, func(r *model.Row) error {
		return releasing(model.Apply(r, ev, now)) // unless it moved on meanwhile
	})
	retry := err != nil && !errors.Is(err, runstore.ErrRunNotFound) && jsfault.IsTransient(ctx, err)
	if err != nil && !retry && !errors.Is(err, runstore.ErrRunNotFound) {
		w.log.WarnContext(ctx, "release a run left behind", "run_id", id, "err", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if retry {
		l.releasing = false
		w.leftovers[id] = l // tried again at a later beat
	} else {
		delete(w.leftovers, id)
	}
}
