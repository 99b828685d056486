package finish

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/settle"
)

// backoff is the pause before the next attempt after attempts failed ones:
// RetryDelay doubled per failure, at most MaxRetryDelay.
func (d *Deliverer) backoff(attempts int) time.Duration {
	return min(d.cfg.RetryDelay<<min(attempts-1, 20), MaxRetryDelay)
}

// retryLater settles a message the deliverer stopped before handling: it
// comes back in a second, to whichever deliverer is running then.
func retryLater(jetstream.Msg) settle.Outcome { return settle.Retry(time.Second) }

// maxJitter spreads the retries of deliverers that wait for the same claim.
const maxJitter = 250 * time.Millisecond

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
