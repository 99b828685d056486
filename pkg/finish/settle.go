package finish

import (
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
