package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// syncParallelism bounds the row syncs one heartbeat runs at once.
const syncParallelism = 16

// heart is the worker's one bookkeeping goroutine for every run it holds,
// so what a waiting run costs is memory, not writes or goroutines. Every
// tick it
//   - renews the worker's liveness key every third of a lease: one stored
//     write keeps every run of the worker held (runstore.Liveness);
//   - sends InProgress on each held dispatch every third of a lease (not
//     stored), right after the renewal lands, so the server redelivers it
//     only when the worker is gone, and not before its key expired: a
//     dead worker's runs are taken over one lease after its last renewal;
//     the dispatch of a run parked since the last beat is shelved instead
//     (shelf.go): written down once and then sent nothing;
//   - writes the rows of runs with changes pending (progress snapshot,
//     signal time, counters), each at most every RowSyncInterval;
//   - ends the attempt of a handler that ignored the end of its context for
//     a whole lease, so a stuck handler cannot pin a cancelled run;
//   - releases the rows of attempts that ended without releasing them
//     (leftovers.go), so no run stays held by a live worker that does not
//     execute it.
func (w *Worker) heart(ctx context.Context) {
	renewEvery := w.cfg.Lease / 3
	tick := time.NewTicker(min(w.cfg.RowSyncInterval, renewEvery))
	defer tick.Stop()
	nextRenew := time.Now().Add(renewEvery)
	nextSweep := time.Now().Add(restSweep)
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			renewed := false
			if !now.Before(nextRenew) {
				if err := w.renew(ctx); err != nil {
					if !failing {
						w.log.WarnContext(ctx, "renew worker liveness; retrying", "err", err)
					}
					failing = true
					// At the next beat: a worker that reconnects (its node
					// went away) has a lease minus a renewal's age to get
					// one renewal through, less than a second with a short
					// lease.
					nextRenew = now
				} else {
					if failing {
						w.log.InfoContext(ctx, "worker liveness renewed again")
					}
					failing, renewed = false, true
					nextRenew = now.Add(renewEvery)
				}
			}
			if !now.Before(nextSweep) {
				nextSweep = now.Add(restSweep)
				w.wakeAll()
			}
			w.tend(ctx, now, renewEvery, renewed)
		}
	}
}

// renew renews the liveness key. When the key is lost (it expired during
// an outage or a partition, or another process took the id), or cannot be
// renewed before it would expire, every run of the worker may belong to
// another worker soon: the worker lapses (lapse). While lapsed it claims
// nothing and tries to resume its epoch every beat; when another
// incarnation holds the key, it starts a new epoch.
func (w *Worker) renew(ctx context.Context) error {
	live := w.liveness()
	sent := time.Now() // the key's TTL runs from when the server stores it: no later than this
	if !w.isLapsing() {
		// Wait for the answer no longer than the key lives by this
		// process's reckoning (a lease after the last renewal sent): past
		// that a takeover may begin, and the worker must have lapsed.
		expires := w.holdsUntil().Add(w.cfg.Lease / 6)
		rctx, cancel := context.WithDeadline(ctx, earlier(sent.Add(w.cfg.Lease/3), expires))
		err := live.Renew(rctx)
		cancel()
		if err == nil {
			w.renewed(sent)
			return nil
		}
		w.troubled()
		if !errors.Is(err, runstore.ErrLivenessLost) && time.Now().Before(w.holdsUntil()) {
			// Re-creating streams can take seconds while JetStream is away:
			// never on the heart's own time, or it would miss the lapse.
			w.ensureAside(ctx, err)
			return err
		}
		w.log.ErrorContext(ctx, "worker liveness lost: stopping every attempt of this worker; "+
			"its runs are handed off once JetStream answers again", "err", err)
		w.lapse()
	}
	w.troubled()
	rctx, cancel := context.WithTimeout(ctx, w.cfg.Lease/3)
	defer cancel()
	err := live.Resume(rctx)
	if err != nil && !errors.Is(err, runstore.ErrLivenessLost) {
		// A lapse lasts as long as the outage: say so now and then, not
		// only when it began.
		w.logs.Log(ctx, w.log, slog.LevelWarn, "liveness still lapsed",
			"worker liveness lost: still lapsed, claiming nothing; resuming once JetStream answers", "err", err)
	}
	if errors.Is(err, runstore.ErrLivenessLost) {
		next, aerr := w.store.Workers().Acquire(rctx, w.cfg.ID, w.cfg.Lease)
		if aerr != nil {
			return errors.Join(err, aerr)
		}
		w.mu.Lock()
		w.live = next
		w.mu.Unlock()
		w.log.WarnContext(ctx, "worker liveness taken by another incarnation; going on with a new epoch")
	} else if err != nil {
		return err
	}
	w.renewed(sent)
	w.resume()
	w.log.InfoContext(ctx, "worker liveness back")
	return nil
}

// lapse stops every attempt of the worker (ErrLeaseLost), including those
// still being claimed, and lets no new one start until resume.
func (w *Worker) lapse() {
	w.mu.Lock()
	if w.lapsing {
		w.mu.Unlock()
		return
	}
	w.lapsing = true
	w.lapseDone = make(chan struct{})
	active := make([]*execution, 0, len(w.active))
	for _, e := range w.active {
		active = append(active, e)
	}
	w.mu.Unlock()
	for _, e := range active {
		e.lapse()
	}
}

// resume ends a lapse: the liveness key is held again.
func (w *Worker) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lapsing {
		w.lapsing = false
		close(w.lapseDone)
	}
}

func (w *Worker) isLapsing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lapsing
}

// troubled records that the worker's own liveness could not be renewed
// just now (see recovering).
func (w *Worker) troubled() { w.troubleAt.Store(time.Now().UnixNano()) }

// recovering reports whether this worker's own liveness was in trouble
// within the last lease. A JetStream outage that made this worker's
// renewals fail made every other worker's fail too: a holder whose key is
// missing then is more likely resuming (see renew) than dead, and gets a
// lease to come back before its runs are taken over as a lost worker's.
func (w *Worker) recovering() bool {
	at := w.troubleAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < w.cfg.Lease
}

// mayBeResuming reports whether the holder of row, not alive by its
// liveness key, may be a worker resuming after the same outage this
// worker saw: its key is missing (not replaced by another incarnation's)
// and this worker is recovering.
func (w *Worker) mayBeResuming(ctx context.Context, row *model.Row) bool {
	if !w.recovering() || row.WorkerEpoch == "" {
		return false
	}
	epoch, err := w.store.Workers().Epoch(ctx, row.Worker)
	return err != nil || epoch == ""
}

// awaitLiveness waits until the worker holds its liveness key in good
// standing (a lapse, if any, is over) and reports whether it holds it with
// epoch. It gives up (false) when the worker stops.
func (w *Worker) awaitLiveness(epoch string) bool {
	for {
		w.mu.Lock()
		lapsing, done := w.lapsing, w.lapseDone
		w.mu.Unlock()
		if !lapsing && time.Now().Before(w.holdsUntil()) {
			return w.epoch() == epoch
		}
		if !lapsing {
			done = nil // the heart has not seen the lapse yet: look again shortly
		}
		t := time.NewTimer(w.cfg.Lease / 6)
		select {
		case <-done:
		case <-t.C:
		case <-w.stopped:
			t.Stop()
			return false
		}
		t.Stop()
	}
}

// renewed records a successful renewal sent at t. Counting from the
// answer instead would let a slow answer (a busy cluster, a reconnect)
// make the worker count on its key after the server expired it.
func (w *Worker) renewed(t time.Time) {
	w.liveUntil.Store(t.Add(w.cfg.Lease - w.cfg.Lease/6).UnixNano())
}

// holdsUntil is when the worker stops counting on holding its runs unless
// it renews its liveness: a little before its key would expire.
func (w *Worker) holdsUntil() time.Time { return time.Unix(0, w.liveUntil.Load()) }

func (w *Worker) liveness() *runstore.Liveness {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live
}

// awakeRuns returns the runs the heart beats: those not resting (rest.go).
func (w *Worker) awakeRuns() []*execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*execution, 0, len(w.awake))
	for _, e := range w.awake {
		out = append(out, e)
	}
	return out
}

// tend does one heartbeat's work on every run that does not rest;
// renewed says the liveness key was renewed at this beat. A run with
// nothing to send or write (shelved and parked, rest.go) is put to rest
// and left out of the beats until something wakes it, so what the heart
// does per beat does not grow with the runs that wait.
func (w *Worker) tend(ctx context.Context, now time.Time, beatEvery time.Duration, renewed bool) {
	if !w.takeShelvingTurn() {
		w.tendRuns(ctx, now, beatEvery, renewed, false)
		return
	}
	w.shelveAside(ctx, w.tendRuns(ctx, now, beatEvery, renewed, true))
}

// tendRuns is tend's work on each run; it returns the runs to shelve, when
// it may choose some (mayShelve).
func (w *Worker) tendRuns(ctx context.Context, now time.Time, beatEvery time.Duration, renewed, mayShelve bool) []*execution {
	// Row syncs retry faults; while JetStream is away that must not hold
	// the heart past its next renewal, or it would miss a lapse. A sync cut
	// short stays pending for a later beat.
	ctx, cancel := context.WithTimeout(ctx, beatEvery)
	defer cancel()
	sem := make(chan struct{}, syncParallelism)
	var syncs sync.WaitGroup
	var shelving []*execution
	var resting []*execution
	for _, e := range w.awakeRuns() {
		if !e.ctl.live() {
			continue // not begun yet, or ending: its end tends it
		}
		// The publisher drops what the server stored (publisher.tidy).
		e.pub.tidy()
		// A waiting run's dispatch is shelved (shelf.go), and then costs
		// nothing more. Any other InProgress goes with every renewal of
		// the liveness key, so the dispatch's AckWait and the key run out
		// together; a third of a lease after the last one while renewals
		// fail.
		if mayShelve && len(shelving) < maxShelvePerBeat && w.shelvable(e, now, beatEvery) {
			shelving = append(shelving, e)
		} else {
			e.dlv.beat(now, beatEvery, renewed)
			e.dlv.reshelve(now, shelfDelay/2)
		}
		if e.ctl.stuck(now, w.cfg.Lease) {
			e.log.ErrorContext(ctx, "handler ignored the end of its context for a lease; ending its attempt",
				"cause", context.Cause(e.ctl.context()))
			go e.end(e.forceOutcome)
			continue
		}
		if e.rw.due(now, w.cfg.RowSyncInterval) {
			sem <- struct{}{}
			syncs.Go(func() {
				defer func() { <-sem }()
				e.sync(ctx)
			})
		}
		if e.holds.renewDue(now) {
			sem <- struct{}{}
			syncs.Go(func() {
				defer func() { <-sem }()
				e.renewHolds(ctx, now)
			})
		}
		if e.restful() {
			resting = append(resting, e)
		}
	}
	syncs.Wait()
	for _, e := range resting {
		w.rest(e)
	}
	w.releaseLeftovers(ctx)
	return shelving
}

// sync writes the pending row fields. The row read on a lost race may
// carry a cancel request: it is acted on.
func (e *execution) sync(ctx context.Context) {
	if e.pub.isFenced() {
		return
	}
	e.chargeAtSync(ctx)
	now := time.Now()
	row, err := e.write(ctx, func(r *model.Row) error { return e.apply(r, now, e.synced()) })
	switch {
	case errors.Is(err, ErrLeaseLost):
		e.lose()
	case err != nil:
		e.rw.markDirty() // synced cleared it for a write that did not land
		// Classified without the beat's own bound, which is no caller leaving.
		e.w.fault(context.WithoutCancel(ctx), e.log, "sync run row", err)
	case row.CancelRequested:
		e.ctl.requestCancel(row.Attempt) // the row this attempt holds (owned)
	}
}

// forceOutcome ends the attempt of a handler that will not return: as it
// would have ended had it returned when its context ended.
func (e *execution) forceOutcome() {
	cause := context.Cause(e.ctl.context())
	switch {
	case errors.Is(cause, ErrCancelled):
		e.finalize(events.StatusAborted, events.ReasonCancelled, "", result{})
	case errors.Is(cause, ErrShuttingDown):
		e.handBack()
	default:
		e.abandon()
	}
}
