package worker

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// followCancels starts the worker's one consumer of cancel events (every
// run's jetrun.run.<id>.cancel, from now on): a cancel for a run this
// process holds, or is claiming, cancels its handler. An ordered consumer
// resumes where it stopped after a disconnect, so a cancel published while
// the worker was reconnecting still arrives; a cancel recorded before the
// claim is on the row the claim read.
func (w *Worker) followCancels(ctx context.Context) (jetstream.ConsumeContext, error) {
	c, err := w.js.OrderedConsumer(ctx, w.cfg.Namespace.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{w.cfg.Namespace.CancelWildcard()},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: follow cancels: %w", err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		tokens := strings.Split(m.Subject(), ".")
		if len(tokens) < 2 {
			return
		}
		w.mu.Lock()
		e := w.active[tokens[len(tokens)-2]]
		w.mu.Unlock()
		if e != nil {
			e.requestCancel()
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		w.log.Debug("follow cancels", "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("worker: follow cancels: %w", err)
	}
	return cc, nil
}
