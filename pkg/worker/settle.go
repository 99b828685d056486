package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/settle"
)

// How a dispatch is settled: process decides an outcome for each delivery
// (internal/engine/settle) and the fetch loop applies it; a delivery an
// execution took over is settled by the execution when the attempt ends
// (releaseMsgs).

// maxJitter spreads the redeliveries of dispatches refused at once.
const maxJitter = 250 * time.Millisecond

// retryDelay grows with the number of deliveries: 1s, 2s, 4s … capped at 30s.
func retryDelay(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if meta, err := msg.Metadata(); err == nil {
		n = max(meta.NumDelivered, 1)
	}
	return min(time.Second<<min(n-1, 5), 30*time.Second) + settle.Jitter(maxJitter)
}

// busyDelay is when a dispatch whose run is held (by another live worker,
// or by another delivery being claimed here) comes back: after a lease, as
// the wake-up for a takeover should the holder die.
func (w *Worker) busyDelay() time.Duration { return w.cfg.Lease + settle.Jitter(maxJitter) }

// heldDelay is when a dispatch whose run another live worker holds until
// (see runstore.Workers.HolderUntil; zero: not known) comes back: a little
// after then, a lease at most. A dispatch of a holder that died is
// redelivered about when the holder's key expires (its last InProgress
// went with its last renewal, see heart), possibly just before the server
// removed the key, or up to a third of a lease before it when it was sent
// without a renewal: waiting a whole lease from there took such runs over
// about two leases after the death. A key seen past its end (the server
// removes it a moment later; clocks differ a little) brings the dispatch
// back after the margin alone.
func (w *Worker) heldDelay(until time.Time) time.Duration {
	if until.IsZero() {
		return w.busyDelay()
	}
	margin := w.cfg.Lease/20 + settle.Jitter(maxJitter)
	return min(max(time.Until(until), 0)+margin, w.busyDelay())
}

// releaseMsgs settles every delivery of the run's dispatch the attempt
// holds as o says (deliveries.release); a settle that fails is logged.
func (e *execution) releaseMsgs(o settle.Outcome) {
	errs, shelved, entry := e.dlv.release(o)
	for _, err := range errs {
		e.w.fault(context.Background(), e.log, "settle dispatch ("+o.String()+")", err)
	}
	if shelved {
		e.unshelve(entry)
	}
}

// firstMsg is the delivery the attempt was claimed with.
func (e *execution) firstMsg() jetstream.Msg { return e.dlv.first() }

// adopt records another delivery of this run's dispatch.
func (e *execution) adopt(msg jetstream.Msg) bool { return e.dlv.adopt(msg) }
