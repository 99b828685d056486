package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

// The dispatch consumers.
//
// A worker pulls each agent type's dispatches from the durable consumer
// agent-<type> and dead-letters malformed ones from dispatch-malformed.
// Whoever may create a consumer may also change it (the server cannot tell
// a create from an update), so the shipped child credential may do
// neither: the parent-worker creates the consumers of the agent types the
// workers announce (and dispatch-malformed) and keeps them. A worker binds
// to them; it creates or updates one only when it is missing or differs
// from its settings and its credential allows it (an embedded worker, a
// program with its own credential), and then keeps it too (pull.Keeper).

// createWait bounds a worker's try to create or update a dispatch
// consumer: a credential that may not is refused, and a refused request
// only shows as one that gets no answer.
const createWait = 2 * time.Second

// bindEvery is how often a worker looks for a dispatch consumer it waits
// for.
const bindEvery = 500 * time.Millisecond

// dispatchConsumer is one of the worker's dispatch consumers.
type dispatchConsumer struct {
	cfg jetstream.ConsumerConfig
	c   jetstream.Consumer
	// keep is set when this worker created or updated the consumer: its
	// credential may, so it keeps it as configured.
	keep *pull.Keeper
}

// bindConsumer binds the dispatch consumer cfg: as it is when it exists
// with cfg's settings; created or updated when this worker may; else, when
// it is missing, once a parent-worker created it (the worker announces its
// agent types first, and waits until ctx ends).
func (w *Worker) bindConsumer(ctx context.Context, cfg jetstream.ConsumerConfig) (*dispatchConsumer, error) {
	stream := w.ns.DispatchStream()
	c, err := w.js.Consumer(ctx, stream, cfg.Durable)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("worker: look up consumer %s: %w", cfg.Durable, err)
	}
	if c != nil && !differs(cfg, c.CachedInfo().Config) {
		return &dispatchConsumer{cfg: cfg, c: c}, nil
	}
	if c == nil {
		w.announce(ctx) // the parent-worker creates the consumers of announced agent types
	}
	cctx, cancel := context.WithTimeout(ctx, createWait)
	made, cerr := w.js.CreateOrUpdateConsumer(cctx, stream, cfg)
	cancel()
	switch {
	case cerr == nil:
		return &dispatchConsumer{cfg: cfg, c: made, keep: w.keeper(cfg)}, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("worker: create consumer %s: %w", cfg.Durable, ctx.Err())
	case c != nil:
		w.log.WarnContext(ctx, "dispatch consumer settings differ from this worker's, and it may not change them: "+
			"give parent-worker and child-workers the same JETRUN_LEASE and JETRUN_FLEET_CONCURRENCY",
			"consumer", cfg.Durable, "ack_wait", c.CachedInfo().Config.AckWait, "lease", cfg.AckWait, "err", cerr)
		return &dispatchConsumer{cfg: cfg, c: c}, nil
	}
	w.log.InfoContext(ctx, "waiting for a parent-worker to create the dispatch consumer (this credential may not)",
		"consumer", cfg.Durable, "err", cerr)
	t := time.NewTicker(bindEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("worker: wait for consumer %s (start a parent-worker): %w", cfg.Durable, ctx.Err())
		case <-t.C:
		}
		if c, err := w.js.Consumer(ctx, stream, cfg.Durable); err == nil {
			return &dispatchConsumer{cfg: cfg, c: c}, nil
		}
	}
}

// differs reports whether a consumer's settings got differ from want's in
// what decides delivery (pull.Drift) or in the tunables want sets.
func differs(want, got jetstream.ConsumerConfig) bool {
	return pull.Drift(want, got) != "" || want.AckWait != 0 && got.AckWait != want.AckWait ||
		want.MaxAckPending != 0 && got.MaxAckPending != want.MaxAckPending
}

// repair returns a fetch loop's Repair: it re-creates the streams and
// buckets (ensure), then the consumer when the worker keeps it (counted
// and logged as restored, pull.Keeper), or else checks that it is back (a
// parent-worker restores it).
func (w *Worker) repair(dc *dispatchConsumer) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		w.ensure(ctx, errors.New("fetches of consumer "+dc.cfg.Durable+" fail"))
		ctx, cancel := context.WithTimeout(ctx, engine.RepairEvery)
		defer cancel()
		if dc.keep != nil {
			if err := dc.keep.Check(ctx); err != nil {
				return err
			}
		} else if _, err := w.js.Consumer(ctx, w.ns.DispatchStream(), dc.cfg.Durable); err != nil {
			return fmt.Errorf("consumer %s (a parent-worker restores it): %w", dc.cfg.Durable, err)
		}
		// A re-created dispatch stream numbers its messages from 1 again:
		// ids derived from sequences take its new epoch.
		if s, err := w.js.Stream(ctx, w.ns.DispatchStream()); err == nil {
			w.streamEpoch.Store(wire.StreamEpoch(s.CachedInfo().Created))
		}
		return nil
	}
}

// keeper keeps the dispatch consumer cfg as configured: one another
// process deleted is created again, one it re-pointed, paused or otherwise
// changed is updated back and rewound to its ack floor, so the dispatches
// it moved past meanwhile are delivered (pull.Keeper); both loudly.
func (w *Worker) keeper(cfg jetstream.ConsumerConfig) *pull.Keeper {
	k := &pull.Keeper{JS: w.js, Stream: w.ns.DispatchStream(), Config: cfg, Logger: w.log, ByUpdate: true, Rewind: true,
		Ensure: func(ctx context.Context) error {
			w.ensure(ctx, errors.New("consumer "+cfg.Durable+" is missing"))
			return nil
		}}
	if r, ok := w.cfg.Observer.(pull.Restorer); ok {
		k.Restorer = r
	}
	return k
}
