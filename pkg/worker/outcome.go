package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// How an attempt ends (execution.end runs one of these once): the final
// write of a finished run (finalize), a hand-back on shutdown (handBack), a
// release after a failed start (release), a retry (retry.go), or giving up
// an attempt that lost its run (abandon). Each writes the row first, under
// the attempt's fence, and settles the dispatch last (releaseMsgs).

// finish records the attempt's outcome.
func (e *execution) finish(ctx context.Context, res Result, herr error, panicked bool) {
	cause := context.Cause(ctx) // nil while ctx is live
	delay, retry := retryAfter(herr)
	if (retry || errors.Is(cause, ErrBudgetExceeded) || errors.Is(herr, ErrBudgetExceeded)) && e.unclaimed() {
		// A retry or a give-up is written on a claimed row (it counts the
		// attempt); a run not claimed yet claims it first.
		if err := e.claimLate(ctx); err != nil {
			e.abandon()
			return
		}
	}
	switch {
	case errors.Is(cause, ErrLeaseLost) || errors.Is(herr, ErrLeaseLost) || e.pub.isFenced():
		e.abandon()
	case herr != nil && errors.Is(cause, ErrShuttingDown):
		e.handBack()
	case errors.Is(cause, ErrBudgetExceeded) || errors.Is(herr, ErrBudgetExceeded):
		e.budgetStop(herr, cause)
	case herr != nil && errors.Is(cause, ErrCancelled):
		e.finalize(events.StatusAborted, events.ReasonCancelled, "", result{})
	case panicked:
		e.finalize(events.StatusError, events.ReasonPanic, herr.Error(), result{})
	case retry:
		e.retry(herr, delay)
	case herr != nil:
		e.finalize(events.StatusError, events.ReasonHandlerError, herr.Error(), result{})
	default:
		e.complete(res)
	}
}

// complete validates the result and finalizes the run as completed.
func (e *execution) complete(res Result) {
	var output json.RawMessage
	if res.Output != nil {
		b, err := json.Marshal(res.Output)
		if err != nil {
			e.finalize(events.StatusError, events.ReasonHandlerError, "output is not JSON-encodable: "+err.Error(), result{})
			return
		}
		output = b
	}
	switch {
	case len(output) > events.MaxOutputBytes:
		e.finalize(events.StatusError, events.ReasonHandlerError,
			fmt.Sprintf("output is %d bytes; the limit is %d", len(output), events.MaxOutputBytes), result{})
	case len(res.Summary) > events.MaxSummaryBytes:
		e.finalize(events.StatusError, events.ReasonHandlerError,
			fmt.Sprintf("summary is %d bytes; the limit is %d", len(res.Summary), events.MaxSummaryBytes), result{})
	default:
		e.finalize(events.StatusCompleted, "", "", result{summary: res.Summary, output: output})
	}
}

// result is what the row of a completed run keeps of its handler's
// Result.
type result struct {
	summary string
	output  json.RawMessage
}

func cancelText(r *model.Row) string {
	if r.CancelReason != "" {
		return "cancelled: " + r.CancelReason
	}
	return "cancelled"
}

// finalize moves the run to a final status (the compare-and-set), publishes
// the status event, and acknowledges the dispatch; with status interrupted
// (a budget stop) it gives the run up with its child stopped. A cancel that
// lands on an interrupted run (the reconciler's teardown after a give-up)
// does not replace the give-up with "aborted": the row stays interrupted,
// with the child no longer running.
func (e *execution) finalize(status events.Status, reason, text string, res result) {
	if status.Final() && e.endUnclaimed() {
		e.endWithoutClaim(status, reason, text, res)
		return
	}
	if e.unclaimed() {
		if err := e.claimLate(context.Background()); err != nil {
			e.abandon()
			return
		}
	}
	// Everything the attempt published is stored before the run is final:
	// through faults, for as long as the worker holds its runs.
	dctx, dcancel := context.WithDeadline(context.Background(), later(e.w.holdsUntil(), time.Now().Add(writeTimeout)))
	err := e.drain(dctx)
	dcancel()
	if errors.Is(err, ErrLeaseLost) {
		e.abandon()
		return
	} else if e.pub.openPending() {
		// The attempt's "running" event (sent as its handler started,
		// see start) is not known stored (a fault kept it out, or the
		// attempt was fenced first): the run is not made final without
		// it. It is released as after a failed start, and runs again.
		e.w.fault(context.Background(), e.log, "store the run's running event; releasing it for a later retry", cmp.Or(err, ErrLeaseLost))
		e.release(retryDelay(e.firstMsg()))
		return
	} else if err != nil {
		e.w.fault(context.Background(), e.log, "store the run's last events", err)
	}
	e.pub.fence()
	e.chargeAtEnd()
	ctx, cancel := writeContext() // after the charge, which may wait out a fault
	defer cancel()
	now := time.Now()
	teardown := false
	row, err := e.writeFinal(func(r *model.Row) error {
		sync := e.synced()
		if r.Status == events.StatusInterrupted && (status == events.StatusAborted || keepsBudgetStop(r, status)) {
			teardown = true
			return e.apply(r, now, sync, model.ChildStopped{By: e.holder()})
		}
		teardown = false
		msg := text
		if status == events.StatusAborted && msg == "" {
			msg = cancelText(r)
		}
		var end model.Event = model.Ended{By: e.holder(), Status: status, Reason: reason, Error: msg, Summary: res.summary, Output: res.output}
		if status == events.StatusInterrupted {
			end = model.Interrupted{By: e.holder(), Reason: reason, Error: msg}
		}
		return e.apply(r, now, sync, end)
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			e.abandon()
			return
		}
		// The outcome is lost: the run is released once JetStream answers
		// (or taken over if this worker stops) and runs again; the
		// dispatch is left unacknowledged for exactly that.
		e.w.fault(ctx, e.log, "record run outcome", err, "status", status)
		e.leaveBehind(false)
		e.releaseMsgs(settle.Leave())
		return
	}
	if teardown {
		// The give-up's child has stopped: say so on the timeline (a replay
		// following the run ends here).
		msgID := wire.StatusMsgID(e.id, row.Attempt, events.StatusInterrupted) + ".stopped"
		if err := e.w.rt.PublishStatus(ctx, row, e.w.cfg.ID, msgID); err != nil {
			e.log.WarnContext(ctx, "publish child stopped", "err", err)
		}
	} else {
		if err := e.w.rt.Announce(ctx, row, e.w.cfg.ID); err != nil {
			// The row is final; a redelivery of the dispatch repairs the
			// event, the reconciler the finish.
			e.w.fault(ctx, e.log, "publish final status; leaving the dispatch for a repair", err)
			e.releaseMsgs(settle.Leave())
			return
		}
		e.w.unindexIfSettled(ctx, row)
	}
	e.ctl.setOutcome(string(row.Status), row.Reason)
	e.w.advanceKey(ctx, row)
	e.log.InfoContext(ctx, "run finished", "status", row.Status)
	e.releaseMsgs(settle.Ack())
}

// writeFinal writes the outcome, retrying failures with backoff for as long
// as the lease lasts (heartbeating the dispatch meanwhile), so a KV hiccup
// does not throw a finished result away.
func (e *execution) writeFinal(fn func(*model.Row) error) (*model.Row, error) {
	deadline := later(e.w.holdsUntil(), time.Now().Add(writeTimeout))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var row *model.Row
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond), backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0))
	err := backoff.Retry(func() error {
		// The heart does not tend an ended attempt: its final write,
		// retried through a fault, beats for itself, and a run that ends
		// quickly sends no InProgress at all.
		e.dlv.beat(time.Now(), e.w.cfg.Lease/3, false)
		r, err := e.write(ctx, fn)
		if errors.Is(err, ErrLeaseLost) {
			return backoff.Permanent(err)
		}
		row = r
		return err
	}, backoff.WithContext(b, ctx))
	return row, err
}

// writeContext is for the writes that end an attempt: they must outlive a
// shutdown's cancellation of the handler context.
func writeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), writeTimeout)
}

// writeTimeout bounds the row and event writes that end or hand back a run;
// they use a context of their own so a shutdown cannot cut them off.
const writeTimeout = 10 * time.Second

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// handBack releases the lease so another worker can take the run over at
// once, and returns the dispatch to the queue.
func (e *execution) handBack() {
	if e.endUnclaimed() {
		// Nothing of the attempt is stored: the dispatch goes back as it came.
		e.pub.fence()
		e.ctl.setOutcome(OutcomeHandedBack, "")
		e.releaseMsgs(settle.Retry(0))
		return
	}
	dctx, dcancel := writeContext()
	_ = e.drain(dctx)
	dcancel()
	e.pub.fence()
	e.chargeAtEnd()
	ctx, cancel := writeContext()
	defer cancel()
	now := time.Now()
	_, err := e.write(ctx, func(r *model.Row) error {
		return e.apply(r, now, e.synced(), model.HandedBack{By: e.holder()})
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			e.abandon()
			return
		}
		e.log.WarnContext(ctx, "hand the run back; it is released once JetStream answers, or taken over if this worker stops", "err", err)
		e.leaveBehind(false)
	}
	e.ctl.setOutcome(OutcomeHandedBack, "")
	e.log.InfoContext(ctx, "run handed back")
	e.releaseMsgs(settle.Retry(0)) // immediate redelivery to another worker
}

// release gives the run up after a failure to start it: the run is
// released (the failure was the infrastructure's, not a lost worker's, so
// it counts as a hand-off, not against MaxAttempts) and the dispatch comes
// back after delay, so a broken stream does not make workers spin.
//
// The release is retried through transient faults for as long as the
// worker holds its runs (writeFinal): a release that did not land would
// leave the attempt counted as a lost worker's.
func (e *execution) release(delay time.Duration) {
	if e.endUnclaimed() {
		e.pub.fence()
		e.ctl.setOutcome(OutcomeReleased, "")
		e.releaseMsgs(settle.Retry(delay))
		return
	}
	ctx, cancel := writeContext()
	defer cancel()
	e.pub.fence()
	now := time.Now()
	if _, err := e.writeFinal(func(r *model.Row) error {
		return e.apply(r, now, model.HandedBack{By: e.holder()})
	}); err != nil && !errors.Is(err, ErrLeaseLost) {
		e.log.WarnContext(ctx, "release the run; it is released once JetStream answers", "err", err)
		e.leaveBehind(false)
	}
	e.ctl.setOutcome(OutcomeReleased, "")
	e.releaseMsgs(settle.Retry(delay))
}

// abandon gives up an attempt that no longer holds the run. The dispatch is
// acknowledged only if the run is final; otherwise it belongs to the new
// holder. An attempt stopped by a lapse of the worker's liveness waits
// until the worker is back: if it resumed its epoch and the row still
// names the attempt, the run is handed off (handOffLapsed). An attempt
// whose run another worker took over is recorded as a lapse (refundLapse).
func (e *execution) abandon() {
	if e.endUnclaimed() {
		e.abandonUnclaimed()
		return
	}
	e.pub.fence()
	if (e.ctl.isLapsed() || e.pub.livenessRanOut()) && e.w.awaitLiveness(e.epoch) && e.handOffLapsed() {
		return
	}
	ctx, cancel := writeContext()
	defer cancel()
	row, _, err := e.w.store.Get(ctx, e.id)
	if err == nil {
		// Ended or given up while this attempt was lost (its worker's
		// liveness lapsed): the steps it stored count on the run, now that
		// it stores no more.
		row = e.w.countLostSteps(ctx, row)
	}
	if err == nil && row.Status.Final() {
		// Ended elsewhere, or by our own final write whose answer was lost:
		// make sure its status event and finish exist before the ack.
		if err := e.w.ensureFinalEvent(ctx, row); err != nil {
			e.log.WarnContext(ctx, "announce final status; leaving the dispatch for a repair", "err", err)
			e.releaseMsgs(settle.Leave())
			return
		}
		e.ctl.setOutcome(OutcomeEndedElsewhere, "")
		e.log.InfoContext(ctx, "run ended elsewhere; attempt stopped")
		e.releaseMsgs(settle.Ack())
		return
	}
	if errors.Is(err, runstore.ErrRunNotFound) {
		e.ctl.setOutcome(OutcomeEndedElsewhere, "")
		e.log.InfoContext(ctx, "run cleared; attempt stopped")
		e.releaseMsgs(settle.Ack())
		return
	}
	if err == nil && row.Attempt > e.attempt {
		e.refundLapse(ctx)
	}
	if err != nil || row.HeldBy(e.w.cfg.ID, e.attempt) {
		// Stopped by a lapse, and the hand-off did not land (or the row
		// could not be read): the row may still name this worker.
		e.leaveBehind(e.ctl.isLapsed() || e.pub.livenessRanOut())
	}
	e.ctl.setOutcome(OutcomeLeaseLost, "")
	// When the worker's liveness lapses every attempt stops at once: one
	// line per interval says so, with the count of the others.
	e.w.logs.Log(ctx, e.log, slog.LevelWarn, "lease lost", "lease lost; attempt stopped")
	e.releaseMsgs(settle.Leave())
}

// handOffLapsed releases a run whose attempt a lapse of the worker's
// liveness stopped, once the worker is back with the same epoch, and
// returns its dispatch to the queue: the attempt is recorded as a blink,
// a hand-off, so it does not count against MaxAttempts (the process lived
// on; no worker was lost). It reports false when the row no longer names
// the attempt (taken over, ended, cleared): abandon goes on as for any lost
// attempt.
func (e *execution) handOffLapsed() bool {
	ctx, cancel := writeContext()
	defer cancel()
	now := time.Now()
	lapsed := e.holder()
	lapsed.Epoch = e.epoch // the attempt of this very incarnation
	row, err := e.write(ctx, func(r *model.Row) error {
		return e.apply(r, now, e.synced(), model.Lapsed{By: lapsed})
	})
	if err != nil {
		if !errors.Is(err, ErrLeaseLost) {
			e.w.fault(ctx, e.log, "hand off a run after a liveness lapse; it is taken over later", err)
		}
		return false
	}
	// A run given up meanwhile (interrupted: no attempt follows) counts
	// the steps the attempt stored whose answers the lapse cut off.
	e.w.countLostSteps(ctx, row)
	e.ctl.setOutcome(OutcomeLeaseLost, "")
	e.w.logs.Log(ctx, e.log, slog.LevelInfo, "handed off after a lapse", "run handed off after a lapse of the worker's liveness")
	e.releaseMsgs(settle.Retry(0)) // at once, to any worker
	return true
}

// refundLapse records, on a run another worker took over while this
// process lived on, that the attempt ended with a lapse of the worker's
// liveness, not a lost process: a run is taken over only when its holder's
// key is gone, and this process is here to say it did not die (its key
// expired in an outage that outlasted the lease, or before it could notice).
// So the attempt counts as a hand-off (model.Lapsed, model.Blinked), not against
// MaxAttempts, and an outage does not use up a run's attempts however often
// it makes workers take each other's runs over. Only the run's blinks and
// hand-off count change, so the write cannot disturb the attempt that holds
// the run now.
func (e *execution) refundLapse(ctx context.Context) {
	_, _, err := e.w.store.Mutate(ctx, e.id, model.Mutation(time.Now(), model.Blinked{Attempt: e.attempt}))
	if err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
		e.w.fault(ctx, e.log, "record a lapse on a run taken over meanwhile", err)
	}
}

// drain publishes a pending coalesced progress event and waits until every
// event of the attempt is stored.
func (e *execution) drain(ctx context.Context) error {
	if e.pub.isFenced() {
		return nil
	}
	if err := e.emit.flush(ctx); err != nil {
		return err
	}
	return e.pub.flush(ctx)
}

// ensureFinalEvent publishes the status event of a final row unless the run's
// newest status event already says so.
func (w *Worker) ensureFinalEvent(ctx context.Context, row *model.Row) error {
	subject := w.ns.RunSubject(row.ID, events.KindStatus)
	last, err := w.rt.EventsStreamFor(row.ID).GetLastMsgForSubject(ctx, subject)
	if err == nil {
		if st, derr := decodeStatus(last.Data); derr == nil && st.Status == row.Status {
			return nil
		}
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("worker: read last status of run %s: %w", row.ID, err)
	}
	return w.rt.Announce(ctx, row, w.cfg.ID)
}

// unindexIfSettled removes a settled run from the active-run index at once,
// sparing the reconciler a look; the reconciler does it otherwise.
func (w *Worker) unindexIfSettled(ctx context.Context, r *model.Row) {
	if err := w.store.Index().UnindexIfSettled(ctx, r); err != nil {
		w.log.WarnContext(ctx, "unindex settled run", "run_id", r.ID, "err", err)
	}
}

func decodeStatus(data []byte) (events.StatusEvent, error) {
	var s events.StatusEvent
	err := json.Unmarshal(data, &s)
	return s, err
}
