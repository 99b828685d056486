package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/holding"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// answerHolds answers, on the worker's own subject, which of the runs a
// question names this process no longer executes (internal/holding): the
// reconciler asks for the runs whose rows name this worker, and another
// worker asks for a run whose dispatch was redelivered to it; either
// releases what this process does not execute. A run is executed here while it is claimed
// or executing, and also while it is left behind (leftovers.go): then the
// heart releases its row itself.
func (w *Worker) answerHolds() (*nats.Subscription, error) {
	return holding.Serve(w.js.Conn(), w.ns.WorkerSubject(w.cfg.ID), func(id string) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, left := w.leftovers[id]
		return w.active[id] != nil || left
	})
}

// holderIdle reports whether the live worker holding row says it does not
// execute it. Asked only for a redelivered dispatch (the holder of a run
// it executes keeps its dispatch from being redelivered, so a redelivery
// reaching another worker is already a sign); no answer counts as "it
// executes it".
func (w *Worker) holderIdle(ctx context.Context, row *model.Row, msg jetstream.Msg) bool {
	if meta, err := msg.Metadata(); err != nil || meta.NumDelivered < 2 {
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, holderQuestionTimeout)
	defer cancel()
	idle, err := holding.Ask(qctx, w.js.Conn(), w.ns.WorkerSubject(row.Worker), []string{row.ID})
	return err == nil && slices.Contains(idle, row.ID)
}

// lapsedHolderAnswers asks the holder of row, a running run whose holder
// has no liveness key, whether it executes the run. A process that answers
// is alive: its key lapsed in an outage (a quorum loss, a reconnect) and it
// has not written it again yet, so its runs are not a lost worker's. alive
// says it answered, idle that it does not execute the run. A dead holder
// has no subscription, so the question fails at once (no responders). A
// key of another incarnation of the same worker id means the holder is
// gone: then nobody is asked (the new process would answer for the old).
func (w *Worker) lapsedHolderAnswers(ctx context.Context, row *model.Row) (alive, idle bool) {
	if row.Status != events.StatusRunning || row.Worker == "" || row.Worker == w.cfg.ID || row.WorkerEpoch == "" {
		return false, false
	}
	if epoch, err := w.store.Workers().Epoch(ctx, row.Worker); err != nil || epoch != "" {
		return false, false
	}
	qctx, cancel := context.WithTimeout(ctx, holderQuestionTimeout)
	defer cancel()
	notExecuted, err := holding.Ask(qctx, w.js.Conn(), w.ns.WorkerSubject(row.Worker), []string{row.ID})
	if err != nil {
		return false, false
	}
	return true, slices.Contains(notExecuted, row.ID)
}

// holderQuestionTimeout bounds a question to another worker.
const holderQuestionTimeout = time.Second

// releaseIdle clears the holder of row, a run its live worker says it does
// not execute, unless the row moved on since it was read: the attempt
// counts as a hand-off (its process lives on), and the run is claimed
// afresh. lapsed says the holder's liveness lapsed: the attempt is then
// recorded as a blink, which the holder records too once it is back
// (once per attempt, whoever is first).
func (w *Worker) releaseIdle(ctx context.Context, log *slog.Logger, row *model.Row, lapsed bool) error {
	var ev model.Event = model.HandedBack{By: heldBy(row)}
	if lapsed {
		ev = model.Lapsed{By: heldBy(row)}
	}
	now := time.Now()
	_, _, err := w.store.Mutate(ctx, row.ID, func(r *model.Row) error {
		if r.Status != events.StatusRunning {
			return runstore.ErrNoChange
		}
		return releasing(model.Apply(r, ev, now))
	})
	if err == nil {
		log.InfoContext(ctx, "run held by a live worker that does not execute it; released",
			"holder", row.Worker, "holder_attempt", row.Attempt)
	}
	return err
}

// heldBy is the attempt holding row, as read.
func heldBy(row *model.Row) model.Holder {
	return model.Holder{Worker: row.Worker, Epoch: row.WorkerEpoch, Attempt: row.Attempt}
}

// releasing maps a release's refusal (the row moved on since it was
// read: taken over, released, ended) to leaving the row as it is.
func releasing(err error) error {
	if errors.Is(err, model.ErrNotHolder) {
		return runstore.ErrNoChange
	}
	return err
}
