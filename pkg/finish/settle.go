package finish

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// An outcome is how one message is settled: what its delivery decided.
// Deliveries return one; settle applies it, in one place.
type outcome struct {
	verb   verb
	delay  time.Duration // retry: redelivered after
	reason string        // drop: why (the server keeps it with the message's advisory)
}

type verb int

const (
	// leave: neither acknowledged nor refused; the message comes back
	// after its AckWait (a claim that could not be recorded as delivered
	// expires the same way: at least once).
	leave verb = iota
	done       // acknowledged
	retry      // refused, redelivered after delay
	drop       // terminated with reason, never redelivered
)

func acked() outcome                     { return outcome{verb: done} }
func retryAfter(d time.Duration) outcome { return outcome{verb: retry, delay: d} }
func dropped(reason string) outcome      { return outcome{verb: drop, reason: reason} }
func left() outcome                      { return outcome{verb: leave} }
func (o outcome) String() string         { return [...]string{"leave", "ack", "nak", "term"}[o.verb] }

// jitter is a random pause of up to maxJitter, added to a wait for another
// deliverer's claim so the deliverers waiting on it do not retry at once.
func jitter() time.Duration { return time.Duration(rand.Int64N(int64(maxJitter))) }

// backoff is the pause before the next attempt after attempts failed ones:
// RetryDelay doubled per failure, at most MaxRetryDelay.
func (d *Deliverer) backoff(attempts int) time.Duration {
	return min(d.cfg.RetryDelay<<min(attempts-1, 20), MaxRetryDelay)
}

// maxJitter spreads the retries of deliverers that wait for the same claim.
const maxJitter = 250 * time.Millisecond

// settle applies o to msg; a failure is logged once (fault throttles it).
func (d *Deliverer) settle(ctx context.Context, log *slog.Logger, msg jetstream.Msg, o outcome) {
	var err error
	switch o.verb {
	case done:
		err = msg.Ack()
	case retry:
		err = msg.NakWithDelay(o.delay)
	case drop:
		err = msg.TermWithReason(events.Truncate(o.reason, 200))
	default:
		return
	}
	if err != nil {
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
