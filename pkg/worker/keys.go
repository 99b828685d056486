package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/keys"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Concurrency keys on the worker side (package keys explains the
// protocol). A worker:
//   - submits a keyed dispatch that has no row (a service published it
//     straight to the stream) under its key, holding the message: a drop
//     refused goes to the DLQ with the reason;
//   - holds back a dispatch of a queued debounce run until its quiet window
//     ends, then advances the key; a dispatch of a run still queued after
//     that is acknowledged (the key's next advance publishes another);
//   - advances the key of every keyed run it ends, before it acknowledges
//     the run's dispatch, so a crash in between is repaired by the
//     dispatch's redelivery (or by the reconciler).

// submitKeyed enters a keyed dispatch without a row under its key. done is
// false when the caller should read the row and go on; else o settles the
// dispatch.
func (w *Worker) submitKeyed(ctx context.Context, agentType string, d events.Dispatch, msg jetstream.Msg) (o settle.Outcome, done bool) {
	row := model.NewRun(agentType, d, 0, time.Now())
	_, err := keys.Submit(ctx, w.rt, row, keys.Held{RunID: d.RunID, Seq: wire.StreamSeq(msg)})
	switch {
	case err == nil, errors.Is(err, runstore.ErrRunExists):
		return settle.Leave(), false
	case errors.Is(err, runstore.ErrKeyBusy):
		return w.deadLetter(ctx, msg, agentType, DeadLetterKeyBusy, err.Error()), true
	}
	if ctx.Err() != nil {
		return settle.Retry(0), true
	}
	w.fault(ctx, w.log.With("run_id", d.RunID), "submit keyed run", err)
	w.ensure(ctx, err)
	return settle.Retry(retryDelay(msg)), true
}

// gate acts on a dispatch of a queued run: wait out a debounce window,
// else advance the key and run it if that started it (retry: read the row
// again).
func (w *Worker) gate(ctx context.Context, msg jetstream.Msg, row *model.Row) (o settle.Outcome, retry bool, err error) {
	if wait := time.Until(row.NotBefore); wait > 0 {
		return settle.Retry(wait + 20*time.Millisecond), false, nil
	}
	held := keys.Held{RunID: row.ID, Seq: wire.StreamSeq(msg)}
	if err := keys.Advance(ctx, w.rt, row.ConcurrencyKey, held); err != nil {
		return settle.Leave(), false, err
	}
	now, _, err := w.store.Get(ctx, row.ID)
	if errors.Is(err, runstore.ErrRunNotFound) {
		return settle.Ack(), false, nil
	}
	if err != nil {
		return settle.Leave(), false, err
	}
	if now.Status == events.StatusQueued {
		return settle.Ack(), false, nil // not its turn: the key's next advance dispatches it
	}
	return settle.Leave(), true, nil
}

// advanceKey hands the key of the keyed run r, just ended, to the next run.
// A failure is logged: a redelivery of r's dispatch or the reconciler
// advances the key again.
func (w *Worker) advanceKey(ctx context.Context, r *model.Row) {
	if r == nil || r.ConcurrencyKey == "" || r.Live() {
		return
	}
	if err := keys.Advance(ctx, w.rt, r.ConcurrencyKey, keys.Held{}); err != nil {
		w.log.WarnContext(ctx, "advance concurrency key", "run_id", r.ID, "key", r.ConcurrencyKey, "err", err)
	}
}
