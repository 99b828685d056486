package finish

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/settle"
)

// backoff is the pause before the next attempt after attempts failed ones:
// RetryDelay doubled per failure, at most MaxRetryDelay.
func (d *Deliverer) backoff(attempts int) time.Duration {
	return min(d.cfg.RetryDelay<<min(attempts-1, 20), MaxRetryDelay)
}

// maxJitter spreads the retries of deliverers that wait for the same claim.
const maxJitter = 250 * time.Millisecond

// settle applies o to msg; a failure is logged once (fault throttles it).
func (d *Deliverer) settle(ctx context.Context, log *slog.Logger, msg jetstream.Msg, o settle.Outcome) {
	if err := o.Apply(msg); err != nil {
		d.fault(ctx, log, "settle message ("+o.String()+")", err)
	}
}
