package worker

import (
	"errors"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// A handler that returns jetruntype.RetryAfter(err, d) asks for another
// attempt: the attempt ends, the run keeps its chunks, milestones and
// steps, and it is executed again as a new attempt (by this worker or
// another) after d, or after a delay that grows with each try when d is 0,
// like a takeover. Such attempts count against Config.MaxAttempts; when
// none is left the run ends "error" with the handler's text and reason
// "handler-error". An error marked jetruntype.Cancel is never retried, even
// inside a RetryAfter.

// retryAfter reports whether herr asks for another attempt, and after how
// long (0: retryDelay's growing delay).
func retryAfter(herr error) (time.Duration, bool) {
	var r *jetruntype.RetryError
	if isCancel(herr) || !errors.As(herr, &r) {
		return 0, false
	}
	return max(r.Delay, 0), true
}

// isCancel reports whether err is marked jetruntype.Cancel.
func isCancel(err error) bool {
	var c *jetruntype.CancelError
	return errors.As(err, &c)
}

// retry ends an attempt whose handler asked for another one (RetryAfter):
// the row is released without counting a hand-off, so the next claim is a
// new attempt that counts against MaxAttempts, and the dispatch comes back
// after delay (retryDelay's when 0). The last allowed attempt ends the run
// "error".
func (e *execution) retry(herr error, delay time.Duration) {
	e.pauseLimits(herr, delay)
	row := e.rw.row()
	used := row.Attempt - row.Handoffs
	if used >= e.w.cfg.MaxAttempts {
		e.finalize(events.StatusError, events.ReasonHandlerError, herr.Error(), result{})
		return
	}
	dctx, dcancel := writeContext()
	err := e.drain(dctx)
	dcancel()
	if errors.Is(err, ErrLeaseLost) {
		e.abandon()
		return
	}
	e.pub.fence()
	e.chargeAtEnd()
	ctx, cancel := writeContext() // after the charge, which may wait out a fault
	defer cancel()
	now := time.Now()
	_, err = e.write(ctx, func(r *model.Row) error {
		// herr is what the next attempt retries, shown until its claim.
		return e.apply(r, now, e.synced(), model.Retrying{By: e.holder(), Error: herr.Error()})
	})
	if errors.Is(err, ErrLeaseLost) {
		e.abandon()
		return
	}
	if err != nil {
		e.log.Warn("release the run for a retry; it is taken over when its lease expires", "err", err)
	}
	e.ctl.setOutcome(OutcomeRetry, "")
	if delay == 0 {
		delay = retryDelay(e.firstMsg())
	}
	e.log.Info("attempt failed; the run will be retried", "err", herr, "retry_in", delay)
	e.releaseMsgs(settle.Retry(delay))
}
