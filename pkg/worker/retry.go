package worker

import (
	"errors"
	"time"

	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// ErrRetry marks a handler error as worth another attempt: the attempt
// ends, the run keeps its chunks and milestones, and it is executed again
// as a new attempt (by this worker or another, after a delay that grows
// with each try), like a takeover. Such attempts count against
// Config.MaxAttempts; when none is left the run ends "error" with the
// handler's text and reason "handler-error". Wrap it with Retryable.
var ErrRetry = errors.New("retryable")

// Retryable returns err marked with ErrRetry (nil stays nil).
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryError{err}
}

type retryError struct{ err error }

func (r *retryError) Error() string        { return r.err.Error() }
func (r *retryError) Unwrap() []error      { return []error{r.err, ErrRetry} }
func (r *retryError) Is(target error) bool { return target == ErrRetry }

// retry ends an attempt whose handler asked for another one (ErrRetry):
// the row is released without counting a hand-off, so the next claim is a
// new attempt that counts against MaxAttempts, and the dispatch comes back
// after a delay. The last allowed attempt ends the run "error".
func (e *execution) retry(herr error) {
	e.curMu.Lock()
	used := e.cur.Attempt - e.cur.Handoffs
	e.curMu.Unlock()
	if used >= e.w.cfg.MaxAttempts {
		e.finalize(events.StatusError, events.ReasonHandlerError, herr.Error(), nil)
		return
	}
	ctx, cancel := writeContext()
	defer cancel()
	if err := e.drain(ctx); errors.Is(err, ErrLeaseLost) {
		e.abandon()
		return
	}
	e.pub.fence()
	e.chargeAtSync(ctx)
	_, err := e.write(ctx, func(r *jetruntype.Run) error {
		if err := e.owned(r); err != nil {
			return err
		}
		e.applyState(r)
		r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
		r.Error = herr.Error() // what the next attempt retries; cleared by its claim
		return nil
	})
	if errors.Is(err, ErrLeaseLost) {
		e.abandon()
		return
	}
	if err != nil {
		e.log.Warn("release the run for a retry; it is taken over when its lease expires", "err", err)
	}
	e.setOutcome(OutcomeRetry, "")
	e.log.Info("attempt failed; the run will be retried", "err", herr)
	delay := retryDelay(e.firstMsg())
	e.releaseMsgs(settle.Retry(delay))
}
