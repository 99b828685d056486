package finish

import (
	"context"
	"errors"
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

// Permanent marks err, returned by a finish or milestone handler, as a
// failure no retry can fix: the delivery is dead-lettered at once instead
// of being retried up to Config.MaxAttempts.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
