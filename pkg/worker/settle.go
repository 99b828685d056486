package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/settle"
)

// How a dispatch is settled: process decides an outcome for each delivery
// (internal/settle) and the fetch loop applies it with settle; a delivery an
// execution took over is settled by the execution when the attempt ends
// (releaseMsgs), through the same settle.

// settle applies o to msg; a failure is logged once (fault throttles it).
func (w *Worker) settle(ctx context.Context, log *slog.Logger, msg jetstream.Msg, o settle.Outcome) {
	if err := o.Apply(msg); err != nil {
		w.fault(ctx, log, "settle dispatch ("+o.String()+")", err)
	}
}

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
