package worker

import (
	"context"
	"log/slog"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
)

// fault logs a failed JetStream call on a run's path at warn level, at
// most once per obs.DefaultLogEvery for each message and class of fault
// (jsfault), with the count of what was left out: during an outage every
// dispatch fails the same way, and one line says so.
func (w *Worker) fault(ctx context.Context, log *slog.Logger, msg string, err error, args ...any) {
	class := jsfault.Classify(ctx, err).String()
	w.logs.Log(ctx, log, slog.LevelWarn, msg+"/"+class, msg, append(args, "fault", class, "err", err)...)
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
