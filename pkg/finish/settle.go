package finish

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/settle"
)

// retryLater settles a message the deliverer stopped before handling: it
// comes back in a second, to whichever deliverer is running then.
func retryLater(jetstream.Msg) settle.Outcome { return settle.Retry(time.Second) }

// maxJitter spreads the retries of deliverers that wait for the same claim.
const maxJitter = 250 * time.Millisecond
