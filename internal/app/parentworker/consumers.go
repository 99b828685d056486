package parentworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

// dispatchConsumers creates and keeps the durable consumers of the dispatch
// stream: dispatch-malformed, and agent-<type> for every agent type a
// worker announces in the agent registry (with the lease and fleet
// concurrency the first announcement it sees says). Whoever may create a consumer
// may also change it, so the child credential may do neither
// (nats-users.conf): child-workers bind to the consumers the parent-worker
// made. A consumer deleted is created again, one re-pointed, paused or
// otherwise changed is updated back and rewound to its ack floor, so the
// dispatches it moved past meanwhile are delivered after all (pull.Keeper,
// every pull.KeepEvery); each restore is an ERROR log line and counts in
// jetrun_consumers_restored_total.
type dispatchConsumers struct {
	rt       *engine.Runtime
	reg      *registry.Registry
	lease    time.Duration // the ack wait of the agent consumers: the workers' lease
	fleet    int           // their max ack pending
	restorer pull.Restorer
	log      *slog.Logger

	keepers map[string]*pull.Keeper // by agent type ("" for dispatch-malformed); the loop's alone
	logs    obs.Throttle
	cancel  context.CancelFunc
	done    chan struct{}
}

// Start creates dispatch-malformed and follows the agent registry.
func (d *dispatchConsumers) Start(ctx context.Context) error {
	d.keepers = map[string]*pull.Keeper{}
	if err := d.add(ctx, "", wire.MalformedConsumerConfig(d.rt.Namespace())); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel, d.done = cancel, make(chan struct{})
	go d.loop(lctx)
	return nil
}

// Shutdown stops following the registry and keeping the consumers.
func (d *dispatchConsumers) Shutdown(context.Context) error {
	if d.cancel != nil {
		d.cancel()
		<-d.done
	}
	return nil
}

func (d *dispatchConsumers) loop(ctx context.Context) {
	defer close(d.done)
	tick := time.NewTicker(pull.KeepEvery)
	defer tick.Stop()
	var types <-chan registry.Announcement
	watch := func() {
		var err error
		if types, err = d.reg.Watch(ctx); err != nil {
			d.fault(ctx, "watch the agent registry", err)
		}
	}
	watch()
	for {
		select {
		case <-ctx.Done():
			return
		case a, ok := <-types:
			if !ok {
				types = nil
				continue
			}
			if _, known := d.keepers[a.AgentType]; !known {
				if err := d.add(ctx, a.AgentType, d.config(a)); err != nil {
					d.fault(ctx, "create dispatch consumer; tried again when its type is announced again", err)
				}
			}
		case <-tick.C:
			if types == nil {
				watch()
			}
			for _, k := range d.keepers {
				if err := k.Check(ctx); err != nil && ctx.Err() == nil {
					d.fault(ctx, "check dispatch consumer", err)
				}
			}
		}
	}
}

// maxAnnouncedLease bounds the lease of an announcement the consumer of
// its agent type takes for its ack wait (the registry may be written by
// any child credential).
const maxAnnouncedLease = time.Hour

// config is the consumer of a's agent type, with the lease and fleet
// concurrency a announces (those of the parent-worker's pool when it says
// none, or a lease out of bounds).
func (d *dispatchConsumers) config(a registry.Announcement) jetstream.ConsumerConfig {
	lease, fleet := d.lease, d.fleet
	if l := time.Duration(a.LeaseMs) * time.Millisecond; l >= time.Second && l <= maxAnnouncedLease {
		lease = l
	}
	if a.FleetConcurrency > 0 {
		fleet = a.FleetConcurrency
	}
	return wire.AgentConsumerConfig(d.rt.Namespace(), a.AgentType, lease, fleet)
}

// add creates the consumer cfg unless it exists (a worker whose credential
// may create it did, with its own lease), then keeps it.
func (d *dispatchConsumers) add(ctx context.Context, agentType string, cfg jetstream.ConsumerConfig) error {
	js, stream := d.rt.JetStream(), d.rt.Namespace().DispatchStream()
	err := jsfault.Retry(ctx, engine.RepairEvery, func(ctx context.Context) error {
		_, err := js.Consumer(ctx, stream, cfg.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			_, err = js.CreateConsumer(ctx, stream, cfg)
			if errors.Is(err, jetstream.ErrConsumerExists) {
				err = nil // a worker created it meanwhile
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("parent-worker: create consumer %s: %w", cfg.Durable, err)
	}
	d.keepers[agentType] = &pull.Keeper{JS: js, Stream: stream, Config: cfg, ByUpdate: true, Rewind: true,
		Ensure: d.rt.Repair, Restorer: d.restorer, Logger: d.log}
	return nil
}

// fault logs a failure at warn level, at most once per obs.DefaultLogEvery
// for each message and class of fault.
func (d *dispatchConsumers) fault(ctx context.Context, msg string, err error) {
	class := jsfault.Classify(ctx, err).String()
	d.logs.Log(ctx, d.log, slog.LevelWarn, msg+"/"+class, msg, "fault", class, "err", err)
}
