package worker

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

// fault logs a failed JetStream call on a run's path at warn level, at
// most once per obs.DefaultLogEvery for each message and class of fault
// (jsfault), with the count of what was left out: during an outage every
// dispatch fails the same way, and one line says so.
func (w *Worker) fault(ctx context.Context, log *slog.Logger, msg string, err error, args ...any) {
	class := jsfault.Classify(ctx, err).String()
	w.logs.Log(ctx, log, slog.LevelWarn, msg+"/"+class, msg, append(args, "fault", class, "err", err)...)
}

// repairConsumer returns a fetch loop's Repair: it re-creates the streams
// and buckets (ensure), then the dispatch consumer cfg (idempotent: an
// existing consumer with these settings is left as it is).
func (w *Worker) repairConsumer(cfg jetstream.ConsumerConfig) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		w.ensure(ctx, errors.New("fetches of consumer "+cfg.Durable+" fail"))
		ctx, cancel := context.WithTimeout(ctx, engine.RepairEvery)
		defer cancel()
		if _, err := w.js.CreateOrUpdateConsumer(ctx, w.ns.DispatchStream(), cfg); err != nil {
			return err
		}
		// A re-created dispatch stream numbers its messages from 1 again:
		// ids derived from sequences take its new epoch.
		if s, err := w.js.Stream(ctx, w.ns.DispatchStream()); err == nil {
			w.streamEpoch.Store(wire.StreamEpoch(s.CachedInfo().Created))
		}
		return nil
	}
}

// keeper keeps the dispatch consumer cfg as configured: a consumer another
// process (any credential that may create one) re-pointed or paused is
// restored loudly (pull.Keeper), by an update: the child role may not
// delete consumers.
func (w *Worker) keeper(cfg jetstream.ConsumerConfig) *pull.Keeper {
	k := &pull.Keeper{JS: w.js, Stream: w.ns.DispatchStream(), Config: cfg, Logger: w.log, ByUpdate: true,
		Ensure: func(ctx context.Context) error {
			w.ensure(ctx, errors.New("consumer "+cfg.Durable+" is missing"))
			return nil
		}}
	if r, ok := w.cfg.Observer.(pull.Restorer); ok {
		k.Restorer = r
	}
	return k
}

// ensure re-creates the streams and buckets the worker uses when a JetStream
// call failed (engine.Runtime.Repair: at most every engine.RepairEvery), so
// an operator's delete (or a lost stream) costs a few seconds of retries,
// not the runs. It is idempotent: what exists is left as it is.
func (w *Worker) ensure(ctx context.Context, cause error) {
	w.ensureUntil(context.WithoutCancel(ctx), cause)
}

// ensureAside is ensure in a goroutine of its own, ended with ctx: the
// heart must not wait on it. Looking up a stream is answered by its leader,
// so during an election it takes the whole engine.RepairEvery, longer than a
// renewal may wait with a short lease.
func (w *Worker) ensureAside(ctx context.Context, cause error) {
	w.beats.Go(func() { w.ensureUntil(ctx, cause) })
}

func (w *Worker) ensureUntil(ctx context.Context, cause error) {
	if err := w.rt.Repair(ctx); err != nil {
		w.fault(ctx, w.log, "re-create streams and buckets after a failure", err, "cause", cause)
	}
}
