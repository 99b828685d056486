package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/pkg/events"
)

// A short run's first attempt claims its run lazily (Config.ClaimWindow):
// its handler starts with nothing written, and
//
//   - if it returns within the window having asked its Run for nothing
//     that leaves a trace, the attempt stores its ending only: the final
//     row (model.EndedWithoutClaim, a compare-and-set against the row it
//     was dispatched with, or a create when the run has none) and the
//     final status event, which carries the attempt and its start;
//   - the moment it asks for anything (lazyRun), or the window passes, it
//     claims the run as every attempt does at its start (the claimed row,
//     then its "running" event), and goes on as any attempt.
//
// Nothing of the attempt is stored before one of those writes: a worker
// killed meanwhile leaves the dispatch unacknowledged, and the server
// redelivers it after its AckWait (a lease), which runs the handler again,
// claimed at its start (only a dispatch's first delivery waits to claim),
// as a run whose worker died does. The window is at most a sixth of the
// lease, so the dispatch cannot come back while the attempt may still end
// unclaimed. Two attempts of a run that run unclaimed side by side (a
// duplicate dispatch) both write against the same row: one ending lands,
// the other's compare-and-set fails and it finds the run ended, as does an
// attempt whose run another attempt claimed meanwhile.

// lazyState is where an attempt is in its claim.
type lazyState int

const (
	lazyUnclaimed lazyState = iota // nothing written
	lazyClaiming                   // its claim is being written
	lazyClaimed                    // claimed (or its claim failed: err)
	lazyEnded                      // ending without a claim
)

// lazyClaim is the claim an attempt has not written yet: the row it was
// dispatched with (nil: the run has none yet, the claim creates it) and
// that row's revision, what the claim writes, and when the attempt began.
// Its lock is a leaf.
type lazyClaim struct {
	fresh        *model.Row // the row a run that has none is created from
	claimed      *model.Row // the row as the claim writes it, at startedAt
	dispatchSeq  uint64     // claimed's, kept once the rows are dropped
	startedAt    time.Time
	checkCleared bool // a plain publish's first delivery: read the tombstone beside a create

	mu    sync.Mutex
	timer *time.Timer // claims the run when the window passes
	state lazyState
	done  chan struct{} // closed when a claim in flight is written
	err   error         // the claim's failure (lazyClaimed)
	row   *model.Row    // the row as last read (nil: none)
	rev   uint64
}

// mayClaimLazily reports whether the run of row, woken by msg, may wait
// to be claimed: the first delivery of its dispatch, for a first attempt
// of a run no reconciler bookkeeping needs (unindexed, no budget, no key,
// no cancel), with the window on. A redelivery (after a crash, a fault, a
// return) claims at once, so a handler that kills its process every time
// still uses up the run's attempts.
func (w *Worker) mayClaimLazily(row *model.Row, msg jetstream.Msg) bool {
	if meta, err := msg.Metadata(); err != nil || meta.NumDelivered != 1 {
		return false
	}
	return w.cfg.ClaimWindow > 0 && row.Unindexed && row.Status == events.StatusStarting &&
		row.Attempt == 0 && row.FirstEventSeq == 0 && row.Parent == "" && row.Detached == nil &&
		row.Budget == nil && row.ConcurrencyKey == "" && !row.CancelRequested
}

// executeLazily runs the attempt e of a run not claimed yet: stored is the
// row it was dispatched with at revision rev (nil: none, fresh is the row
// to create), claimed what the claim writes.
func (w *Worker) executeLazily(ctx context.Context, e *execution, stored, fresh *model.Row, rev uint64, claimed *model.Row, checkCleared bool) {
	e.lz = &lazyClaim{fresh: fresh, claimed: claimed, dispatchSeq: claimed.DispatchSeq, startedAt: claimed.StartedAt,
		checkCleared: checkCleared, row: stored, rev: rev}
	w.execute(ctx, e, claimed, 0)
}

// unclaimed reports whether the attempt has not claimed its run (and is
// not claiming it).
func (e *execution) unclaimed() bool {
	if e.lz == nil {
		return false
	}
	e.lz.mu.Lock()
	defer e.lz.mu.Unlock()
	return e.lz.state == lazyUnclaimed
}

// armClaim claims the run once the window passes, if the attempt has not
// ended or claimed it by then; a claim that fails stops the handler.
func (e *execution) armClaim(ctx context.Context) {
	if e.lz == nil {
		return
	}
	e.lz.mu.Lock()
	defer e.lz.mu.Unlock()
	e.lz.timer = time.AfterFunc(e.w.cfg.ClaimWindow, func() {
		if err := e.claimLate(ctx); err != nil && !errors.Is(err, ErrCancelled) {
			e.lose()
		}
	})
}

// stopTimerLocked stops the window's timer (it may be running its claim: that
// finds the state moved on); lz.mu must be held.
func (lz *lazyClaim) stopTimerLocked() {
	if lz.timer != nil {
		lz.timer.Stop()
	}
}

// endUnclaimed moves an unclaimed attempt to ending without a claim, and
// reports whether it did: false when it claimed its run (or is claiming
// it: then it waits for the claim), or claims lazily not at all.
func (e *execution) endUnclaimed() bool {
	lz := e.lz
	if lz == nil {
		return false
	}
	lz.mu.Lock()
	switch lz.state {
	case lazyUnclaimed:
		lz.state = lazyEnded
		lz.stopTimerLocked()
		lz.mu.Unlock()
		return true
	case lazyClaiming:
		done := lz.done
		lz.mu.Unlock()
		<-done // a claim's write is bounded (writeTimeout)
		return false
	}
	lz.mu.Unlock()
	return false
}

// claimLate claims the run now, once: for the first call of a handler
// that leaves a trace, or when the window passes. It returns the claim's
// failure (ErrLeaseLost: another attempt has the run, or it was cleared),
// also to every later call; ErrCancelled, leaving the run unclaimed, when
// a cancel was requested first (the handler's context is cancelled: the
// attempt ends aborted without a claim).
func (e *execution) claimLate(ctx context.Context) error {
	lz := e.lz
	if lz == nil {
		return nil
	}
	lz.mu.Lock()
	switch lz.state {
	case lazyClaimed:
		err := lz.err
		lz.mu.Unlock()
		return err
	case lazyEnded:
		lz.mu.Unlock()
		return ErrLeaseLost
	case lazyClaiming:
		done := lz.done
		lz.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		return e.claimLate(ctx)
	}
	lz.state, lz.done = lazyClaiming, make(chan struct{})
	row, rev := lz.row, lz.rev
	lz.mu.Unlock()

	claimed, newRev, read, readRev, err := e.retryClaim(ctx, row, rev)
	if err != nil && !errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrCancelled) {
		e.leaveBehind(false) // the claim may have landed: the heart releases it
	}
	started := err == nil
	if started {
		// The attempt goes on as any claimed one: its "running" is on its
		// way before any caller waiting for the claim publishes.
		e.rw.claimed(claimed, newRev)
		if serr := e.start(ctx); serr != nil {
			e.w.fault(ctx, e.log, "start run after its claim window", serr)
			err = ErrLeaseLost // its row names it: its end hands it off (abandon)
		}
	}

	lz.mu.Lock()
	lz.row, lz.rev = read, readRev
	lz.state = lazyClaimed
	if errors.Is(err, ErrCancelled) {
		lz.state = lazyUnclaimed // it ends aborted without a claim
	} else {
		lz.err = err
	}
	if lz.state == lazyClaimed {
		// Claimed, or failed for good: no ending without a claim reads
		// them, and a run waiting for hours does not keep them.
		lz.fresh, lz.claimed, lz.row = nil, nil, nil
	}
	close(lz.done)
	lz.stopTimerLocked()
	lz.mu.Unlock()
	switch {
	case errors.Is(err, ErrCancelled):
		e.ctl.cancelWith(ErrCancelled)
	case err != nil && started:
		e.lose()
	}
	return err
}

// retryClaim writes the claim (writeClaim), retrying transient faults
// for as long as the worker holds its runs, as an attempt's events are: a
// handler never sees a failover as an error.
func (e *execution) retryClaim(ctx context.Context, row *model.Row, rev uint64) (claimed *model.Row, newRev uint64, read *model.Row, readRev uint64, err error) {
	deadline := later(e.w.holdsUntil(), time.Now().Add(writeTimeout))
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond), backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0))
	err = backoff.Retry(func() error {
		var werr error
		claimed, newRev, read, readRev, werr = e.writeClaim(wctx, row, rev)
		row, rev = read, readRev
		if werr != nil && !jsfault.IsTransient(wctx, werr) {
			return backoff.Permanent(werr)
		}
		return werr
	}, backoff.WithContext(b, wctx))
	return claimed, newRev, read, readRev, err
}

// ownClaim reports whether row is the claim this attempt wrote (its
// answer lost).
func (e *execution) ownClaim(row *model.Row) bool {
	return row.Status == events.StatusRunning && row.Worker == e.w.cfg.ID && row.WorkerEpoch == e.epoch &&
		row.Attempt == e.attempt && row.DispatchSeq == e.lz.dispatchSeq
}

// writeClaim writes the attempt's claim on row (nil: the run has none, it
// is created claimed) at revision rev, reading the row again after a lost
// race. It returns the claimed row and its revision, or the row as last
// read, with the failure.
func (e *execution) writeClaim(ctx context.Context, row *model.Row, rev uint64) (claimed *model.Row, newRev uint64, read *model.Row, readRev uint64, err error) {
	lz := e.lz
	for range 8 {
		if row == nil {
			claimed = lz.claimed.Clone()
			newRev, err = e.w.store.Create(ctx, claimed)
			switch {
			case err == nil:
				if lz.checkCleared {
					if cleared, cerr := e.w.store.Index().Cleared(ctx, e.id, claimed.DispatchSeq); cerr != nil || cleared {
						// A run cleared after its dispatch was published
						// (or whose tombstone cannot be read): the row goes
						// again and the attempt stops; its end finds no row.
						if derr := e.w.store.Delete(ctx, claimed); derr != nil {
							e.leaveBehind(false)
						}
						return nil, 0, nil, 0, ErrLeaseLost
					}
				}
				return claimed, newRev, claimed, newRev, nil
			case errors.Is(err, runstore.ErrRunExists):
				if row, rev, err = e.w.store.Get(ctx, e.id); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
					return nil, 0, nil, 0, err
				}
				continue
			default:
				return nil, 0, nil, 0, err // it may have landed: retried, or left behind (claimLate)
			}
		}
		if e.ownClaim(row) {
			return row, rev, row, rev, nil
		}
		if row.Status != events.StatusStarting || row.Attempt != e.attempt-1 || row.Worker != "" {
			return nil, 0, row, rev, ErrLeaseLost // another attempt has it, or it ended
		}
		if row.CancelRequested {
			return nil, 0, row, rev, ErrCancelled
		}
		claimed = row.Clone()
		ev := model.Claimed{Worker: e.w.cfg.ID, Epoch: e.epoch, DispatchSeq: lz.dispatchSeq}
		if err := model.Apply(claimed, ev, lz.startedAt); err != nil {
			return nil, 0, row, rev, ErrLeaseLost
		}
		newRev, err = e.w.store.Update(ctx, claimed, rev)
		switch {
		case err == nil:
			return claimed, newRev, claimed, newRev, nil
		case errors.Is(err, runstore.ErrConflict):
			if row, rev, err = e.w.store.Get(ctx, e.id); errors.Is(err, runstore.ErrRunNotFound) {
				return nil, 0, nil, 0, ErrLeaseLost // cleared
			} else if err != nil {
				return nil, 0, nil, 0, err
			}
		default:
			return nil, 0, row, rev, err // it may have landed: retried, or left behind (claimLate)
		}
	}
	return nil, 0, row, rev, ErrLeaseLost
}

// endWithoutClaim stores the ending of an attempt that never claimed its
// run (model.EndedWithoutClaim) and its status event, then acknowledges
// the dispatch. An ending refused (another attempt claimed or ended the
// run) goes as abandonUnclaimed says; a write that fails leaves the
// dispatch to its redelivery, which runs the handler again.
func (e *execution) endWithoutClaim(status events.Status, reason, text string, res result) {
	e.pub.fence()
	ctx, cancel := writeContext()
	defer cancel()
	if status == events.StatusAborted && text == "" {
		text = "cancelled"
	}
	ev := model.EndedWithoutClaim{
		Attempt: e.attempt, DispatchSeq: e.lz.dispatchSeq, StartedAt: e.lz.startedAt,
		Status: status, Reason: reason, Error: text, Summary: res.summary, Output: res.output,
	}
	row, cleared, err := e.writeEnding(ctx, ev)
	switch {
	case cleared:
		e.ctl.setOutcome(OutcomeEndedElsewhere, "")
		e.log.InfoContext(ctx, "dispatch for a cleared run dropped")
		e.releaseMsgs(settle.Ack())
		return
	case errors.Is(err, ErrLeaseLost):
		e.abandonUnclaimed()
		return
	case err != nil:
		e.w.fault(ctx, e.log, "record run outcome; its dispatch runs it again", err, "status", status)
		e.releaseMsgs(settle.Retry(retryDelay(e.firstMsg())))
		return
	}
	if err := e.w.rt.Announce(ctx, row, e.w.cfg.ID); err != nil {
		e.w.fault(ctx, e.log, "publish final status; leaving the dispatch for a repair", err)
		e.releaseMsgs(settle.Leave())
		return
	}
	e.ctl.setOutcome(string(row.Status), row.Reason)
	e.log.InfoContext(ctx, "run finished", "status", row.Status, "claimed", false)
	e.releaseMsgs(settle.Ack())
}

// writeEnding writes ev on the run's row: a create when the run had none
// (with the tombstone read beside it for a plain publish's first
// delivery: cleared then, and the row deleted again), else a
// compare-and-set from the row as last read (runstore.Store.MutateFrom).
// A row that refuses ev is ErrLeaseLost.
func (e *execution) writeEnding(ctx context.Context, ev model.EndedWithoutClaim) (row *model.Row, cleared bool, err error) {
	lz := e.lz
	lz.mu.Lock()
	known, rev := lz.row, lz.rev
	lz.mu.Unlock()
	now := time.Now()
	if known == nil {
		row, cleared, err = e.createEnding(ctx, ev, now)
		if !errors.Is(err, runstore.ErrRunExists) {
			return row, cleared, err
		}
	}
	row, _, err = e.w.store.MutateFrom(ctx, e.id, known, rev, model.Mutation(now, ev))
	var te *model.TransitionError
	if errors.As(err, &te) || errors.Is(err, runstore.ErrRunNotFound) || errors.Is(err, runstore.ErrFinal) {
		return nil, false, ErrLeaseLost
	}
	return row, false, err
}

// createEnding creates the run's row ended (ev), reading the tombstone
// beside it when the attempt must (see claimNew).
func (e *execution) createEnding(ctx context.Context, ev model.EndedWithoutClaim, now time.Time) (*model.Row, bool, error) {
	lz := e.lz
	lz.mu.Lock()
	row := lz.fresh // the attempt ends: nothing reads it after this
	lz.fresh = nil
	lz.mu.Unlock()
	if row == nil {
		return nil, false, runstore.ErrRunExists // taken already: the caller reads the row
	}
	if err := model.Apply(row, ev, now); err != nil {
		return nil, false, err
	}
	var (
		tomb       sync.WaitGroup
		cleared    bool
		clearedErr error
	)
	if lz.checkCleared {
		tomb.Go(func() { cleared, clearedErr = e.w.store.Index().Cleared(ctx, row.ID, row.DispatchSeq) })
	}
	_, err := e.w.store.Create(ctx, row)
	tomb.Wait()
	if errors.Is(err, runstore.ErrRunExists) {
		return nil, false, err
	}
	if err == nil && (cleared || clearedErr != nil) {
		if derr := e.w.store.Delete(ctx, row); derr != nil {
			return nil, false, derr
		}
		if clearedErr != nil {
			return nil, false, clearedErr
		}
		return nil, true, nil
	}
	return row, false, err
}

// abandonUnclaimed ends an unclaimed attempt that cannot end its run: its
// dispatch is acknowledged when the run ended (its status event made
// sure of), and otherwise returned soon for whichever attempt the run has
// or gets. Nothing of the attempt is on the row.
func (e *execution) abandonUnclaimed() {
	e.pub.fence()
	ctx, cancel := writeContext()
	defer cancel()
	row, _, err := e.w.store.Get(ctx, e.id)
	if err == nil && row.Status.Final() {
		if err := e.w.ensureFinalEvent(ctx, row); err != nil {
			e.log.WarnContext(ctx, "announce final status; leaving the dispatch for a repair", "err", err)
			e.releaseMsgs(settle.Leave())
			return
		}
		e.ctl.setOutcome(OutcomeEndedElsewhere, "")
		e.releaseMsgs(settle.Ack())
		return
	}
	e.ctl.setOutcome(OutcomeLeaseLost, "")
	e.w.logs.Log(ctx, e.log, slog.LevelInfo, "unclaimed attempt stopped", "attempt stopped before it claimed its run")
	e.releaseMsgs(settle.Retry(e.w.busyDelay()))
}
