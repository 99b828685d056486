// Package settle is how jetrun's consumers settle a JetStream message: a
// handler decides an Outcome (acknowledge, redeliver after a delay,
// terminate with a reason, or leave it to its AckWait) and returns it; the
// consumer applies it in one place, where a failure is logged once.
package settle

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
)

// An Outcome is how one message is settled.
type Outcome struct {
	verb   verb
	delay  time.Duration
	reason string
}

type verb int

const (
	leave verb = iota
	ack
	nak
	term
)

// Ack acknowledges the message: it is done.
func Ack() Outcome { return Outcome{verb: ack} }

// Retry refuses the message: it is redelivered after delay (at once for 0).
func Retry(after time.Duration) Outcome { return Outcome{verb: nak, delay: after} }

// Term terminates the message with reason: it is never redelivered.
func Term(reason string) Outcome { return Outcome{verb: term, reason: reason} }

// nakAtOnce is the delay of a Nak meant to redeliver at once: the server
// redelivers it at its next check of pending messages, about 10 ms later.
const nakAtOnce = time.Millisecond

// Leave neither acknowledges nor refuses the message: it comes back after
// its AckWait. The zero Outcome.
func Leave() Outcome { return Outcome{} }

// maxReason bounds the reason a termination carries.
const maxReason = 200

// Apply settles msg as o says.
func (o Outcome) Apply(msg jetstream.Msg) error {
	switch o.verb {
	case ack:
		return msg.Ack()
	case nak:
		// Even "at once" is a Nak with a delay (the least): the server
		// stores a delayed Nak in the consumer's state, where a plain Nak
		// only queues the message in memory. A message handed back just
		// before its server stops (the embedded server of a parent-worker
		// that is stopping) is then redelivered as soon as the server is
		// back, not an AckWait later.
		return msg.NakWithDelay(max(o.delay, nakAtOnce))
	case term:
		return msg.TermWithReason(wire.Truncate(o.reason, maxReason))
	}
	return nil
}

// ApplyReply settles, as o says, the delivery whose acknowledgement subject
// is reply, with a plain publish on nc: for a delivery the server keeps
// pending after a delayed refusal (a shelved dispatch, docs/leases.md),
// which nats.go no longer lets its message settle, or one another process
// received. Leave is sent as InProgress: the delivery comes back after its
// AckWait, as a delivery left alone does.
func (o Outcome) ApplyReply(nc *nats.Conn, reply string) error {
	var body string
	switch o.verb {
	case ack:
		body = "+ACK"
	case nak:
		body = NakBody(max(o.delay, nakAtOnce))
	case term:
		body = "+TERM " + wire.Truncate(o.reason, maxReason)
	default:
		body = "+WPI"
	}
	return nc.Publish(reply, []byte(body))
}

// NakBody is the acknowledgement that refuses a delivery, to be redelivered
// after delay.
func NakBody(delay time.Duration) string {
	return `-NAK {"delay":` + strconv.FormatInt(int64(delay), 10) + `}`
}

// String is the outcome's verb: leave, ack, nak or term.
func (o Outcome) String() string { return [...]string{"leave", "ack", "nak", "term"}[o.verb] }

// Jitter is a random pause in [0, max), added to a wait so the consumers
// waiting on one thing do not all retry at once.
func Jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(max)))
}

// KeepAlive tells the server msg is still being worked on (InProgress)
// every every, so it is not redelivered while its handler runs, until ctx
// ends or stop is called. stop returns once the last InProgress is sent.
func KeepAlive(ctx context.Context, msg jetstream.Msg, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
