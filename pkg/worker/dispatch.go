package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/keys"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// process handles one delivered dispatch: validate it, find or create the
// run's row, and decide what to do (nothing, repair, take it, or run it). It
// returns how to settle the dispatch (the caller applies it: Worker.settle);
// Leave when an execution took the dispatch over (it settles it when the
// attempt ends) or another delivery of it is held here.
func (w *Worker) process(ctx context.Context, agentType string, msg jetstream.Msg, slot *pull.Slot) settle.Outcome {
	msg = wire.WithMetadata(msg) // read several times below: parsed once
	d, err := events.DecodeDispatch(msg.Data())
	if err != nil {
		return w.deadLetter(ctx, msg, agentType, DeadLetterMalformed, err.Error())
	}
	if d.RunID == "" {
		if d.RunID, err = w.deriveRunID(msg); err != nil {
			return w.deadLetter(ctx, msg, agentType, DeadLetterBadID, err.Error())
		}
	}
	wire.TakeTrace(&d, msg.Headers())
	if d.Depth > w.cfg.MaxDepth {
		return w.deadLetter(ctx, msg, agentType, DeadLetterTooDeep, fmt.Sprintf("depth %d exceeds the maximum nesting depth %d", d.Depth, w.cfg.MaxDepth))
	}
	log := &runLog{w: w, runID: d.RunID, agentType: agentType, trace: events.TraceContext{TraceParent: d.TraceParent, TraceState: d.TraceState}}

	// With a claim window the row is read first, even for a plain
	// publish: a handler about to run before its claim must know the run
	// has no row (or is not cleared) before it starts, not learn it from
	// its claim's create.
	blind := plainFirstDelivery(msg, d) && w.cfg.ClaimWindow <= 0
	for try := 0; ; try++ {
		var (
			row     *model.Row
			rev     uint64
			cleared bool
			err     error
		)
		if try == 0 && blind {
			// A plain publish's first delivery has no row (the create
			// below finds one that exists): it reads nothing first, and
			// claimNew reads the tombstone while it creates the row.
			err = runstore.ErrRunNotFound
		} else {
			// A dispatch whose row its client creates after it is usually
			// found with its row: the tombstone is read only after a miss.
			parallel := try == 0 && msg.Headers().Get(events.HeaderRowAfter) == ""
			row, rev, cleared, err = w.readRow(ctx, d.RunID, msg, try == 0, parallel)
		}
		if errors.Is(err, runstore.ErrRunNotFound) {
			// The dispatch is the record (a service published it straight
			// to the stream): the run is claimed by creating its row,
			// unless the run was cleared.
			if cleared {
				log.get().InfoContext(ctx, "dispatch for a cleared run dropped")
				return settle.Ack()
			}
			// A dispatch published straight to the stream is checked
			// against the agent type's input schema here.
			if reason := w.inputMismatch(agentType, d.Input); reason != "" {
				return w.deadLetter(ctx, msg, agentType, DeadLetterSchema, reason)
			}
			if d.ConcurrencyKey != "" {
				if o, done := w.submitKeyed(ctx, agentType, d, msg); done {
					return o
				}
				continue
			}
			var (
				o    settle.Outcome
				done bool
			)
			if o, done, err = w.claimNew(ctx, agentType, d, msg, slot, try == 0 && blind); done {
				return o
			}
			if err == nil {
				continue // another worker created it first: read it
			}
		}
		if errors.Is(err, runstore.ErrCorruptRow) {
			return w.deadLetter(ctx, msg, agentType, DeadLetterCorruptRow, fmt.Sprintf("the row of run %s is not valid JSON", d.RunID))
		}
		if err != nil {
			if ctx.Err() != nil {
				return settle.Retry(0)
			}
			w.fault(ctx, log.get(), "read run row", err)
			w.ensure(ctx, err)
			return settle.Retry(retryDelay(msg))
		}
		if row.AgentType != agentType {
			return w.deadLetter(ctx, msg, agentType, DeadLetterWrongType, fmt.Sprintf(
				"run %s exists as agent type %q; a dispatch for agent type %q cannot run it", d.RunID, row.AgentType, agentType))
		}
		o, retry, err := w.decide(ctx, log, msg, row, rev, slot)
		if err == nil && !retry {
			return o
		}
		if err != nil || try >= 8 {
			w.fault(ctx, log.get(), "claim run", err, "tries", try+1)
			if err != nil {
				w.ensure(ctx, err)
			}
			return settle.Retry(retryDelay(msg))
		}
	}
}

// runLog is the logger of a delivered dispatch's run, built on its first
// use: a delivery on its happy path logs nothing before its execution,
// which has a logger of its own (execution.log), and a logger's
// attributes cost a copy and, under a text or JSON handler, their
// formatting. It is used by the goroutine that processes the delivery.
type runLog struct {
	w                *Worker
	runID, agentType string
	trace            events.TraceContext
	l                *slog.Logger
}

// get returns the run's logger.
func (r *runLog) get() *slog.Logger {
	if r.l == nil {
		r.l = r.w.log.With("run_id", r.runID, "agent_type", r.agentType)
		if id := r.trace.Valid().TraceID(); id != "" {
			r.l = r.l.With("trace_id", id)
		}
	}
	return r.l
}

// plainFirstDelivery reports whether msg, carrying d, is the first
// delivery of a dispatch published on its own (a plain publish, from any
// language): one no client wrote a row for, before it (a nested, detached,
// budgeted or keyed run; jetrun's own re-dispatches) or after it
// (events.HeaderRowAfter). Its run has no row unless its id was used
// before, so the worker creates the row claimed without reading it first:
// a row that exists makes the create fail, and is read then.
func plainFirstDelivery(msg jetstream.Msg, d events.Dispatch) bool {
	if d.Parent != "" || d.Detached != nil || d.Budget != nil || d.ConcurrencyKey != "" ||
		msg.Headers().Get(events.HeaderRowAfter) != "" {
		return false
	}
	meta, err := msg.Metadata()
	return err == nil && meta.NumDelivered == 1
}

// decide acts on one read of the row and says how to settle the dispatch.
// retry is true when a compare-and-set lost a race and the row must be read
// again; then, and with an error, o is not used.
func (w *Worker) decide(ctx context.Context, log *runLog, msg jetstream.Msg, row *model.Row, rev uint64, slot *pull.Slot) (o settle.Outcome, retry bool, err error) {
	now := time.Now()
	switch {
	case row.Status.Final():
		// A finished run is never executed again. Make sure its final status
		// event exists (its writer may have died between the row and the
		// event), then drop the dispatch.
		if err := w.ensureFinalEvent(ctx, row); err != nil {
			return settle.Leave(), false, err
		}
		w.advanceKey(ctx, row)
		return settle.Ack(), false, nil

	case row.Status == events.StatusQueued:
		return w.gate(ctx, msg, row)

	case w.adopt(row, msg):
		return settle.Leave(), false, nil // a redelivery of a run this process is executing: its execution settles it
	}
	if held, until, err := w.heldElsewhere(ctx, row); err != nil {
		return settle.Leave(), false, err
	} else if held && w.holderIdle(ctx, row, msg) {
		// Its live holder does not execute it (holding.go): release it
		// and read the row again to claim it.
		if err := w.releaseIdle(ctx, log.get(), row, false); err != nil {
			return settle.Leave(), false, err
		}
		return settle.Leave(), true, nil
	} else if held {
		// Another live worker has it. Keep the dispatch as the wake-up for a
		// takeover in case that worker dies: it comes back when the
		// holder's key would expire unless renewed.
		return settle.Retry(w.heldDelay(until)), false, nil
	} else if w.mayBeResuming(ctx, row) {
		return settle.Retry(w.busyDelay()), false, nil
	} else if alive, idle := w.lapsedHolderAnswers(ctx, row); alive && idle {
		// Its holder's key lapsed but the process lives and no longer
		// executes it: a hand-off, not a lost worker.
		if err := w.releaseIdle(ctx, log.get(), row, true); err != nil {
			return settle.Leave(), false, err
		}
		return settle.Leave(), true, nil
	} else if alive {
		return settle.Retry(w.busyDelay()), false, nil // it will resume its key, or let the run go
	}
	if row.Worker == w.cfg.ID && row.WorkerEpoch == w.epoch() {
		// An attempt of this very process that ended here without a word
		// (stopped by a lapse of its liveness): the process lived on, so it
		// is a hand-off, not a lost worker. Written by the claim or the end.
		row = row.Clone()
		_ = model.Apply(row, model.Blinked{Attempt: row.Attempt}, now) // or ErrNoChange: recorded already
	}
	switch {
	case row.Status == events.StatusInterrupted:
		// Given up on purpose (a budget) and its child stopped: only a
		// new decision revives it. A dispatch published after the give-up
		// is one (a retry published straight to the stream): it resumes
		// the run, as a retry through the API does. An older one (a
		// redelivery, a repair's copy) is dropped.
		if !publishedAfter(msg, row) {
			return settle.Ack(), false, nil
		}
		return w.resumeGivenUp(ctx, log.get(), row)

	case row.CancelRequested:
		return w.endUnclaimed(ctx, row, rev, events.StatusAborted, events.ReasonCancelled,
			cmp.Or(row.CancelReason, "cancelled before a worker started it"))

	case row.Attempt-row.Handoffs >= w.cfg.MaxAttempts:
		return w.endUnclaimed(ctx, row, rev, events.StatusError, events.ReasonMaxAttempts,
			fmt.Sprintf("the run's worker was lost %d times; giving up", row.Attempt-row.Handoffs))
	}

	if dropped, err := w.clearedTakeover(ctx, log, row); err != nil {
		return settle.Leave(), false, err
	} else if dropped {
		return settle.Ack(), false, nil
	}

	// Registered before the claim, so a cancel that arrives right after it
	// finds the run.
	e := w.newExecution(msg, row.ID, slot)
	if !w.register(e) {
		return settle.Retry(w.busyDelay()), false, nil // another delivery is being claimed here
	}
	claimed, err := w.claim(row, msg, now)
	if err != nil {
		w.unregister(e)
		return settle.Leave(), false, err
	}
	if w.mayClaimLazily(row, msg) {
		w.executeLazily(ctx, e, row, nil, rev, claimed, false)
		return settle.Leave(), false, nil // the execution settled the dispatch
	}
	newRev, err := w.store.Update(ctx, claimed, rev)
	if err != nil {
		w.unregister(e)
		if errors.Is(err, runstore.ErrConflict) {
			return settle.Leave(), true, nil
		}
		w.leaveBehind(claimed.ID, leftover{attempt: claimed.Attempt, epoch: claimed.WorkerEpoch}) // the claim may have landed
		return settle.Leave(), false, err
	}
	if row.Attempt > 0 {
		log.get().InfoContext(ctx, "run taken over", "attempt", claimed.Attempt, "previous_worker", row.Worker)
	}
	w.execute(ctx, e, claimed, newRev)
	return settle.Leave(), false, nil // the execution settled the dispatch
}

// clearedTakeover drops a first attempt's row about to be taken over when
// its run was cleared after its dispatch was published: a row claimNew
// created beside the tombstone read and could not delete (its worker died
// in between, or the delete failed). It deletes the row and reports
// whether it did. Only a takeover of a first attempt pays the read.
func (w *Worker) clearedTakeover(ctx context.Context, log *runLog, row *model.Row) (dropped bool, err error) {
	if row.Attempt != 1 || row.DispatchSeq == 0 {
		return false, nil
	}
	cleared, err := w.store.Index().Cleared(ctx, row.ID, row.DispatchSeq)
	if err != nil || !cleared {
		return false, err
	}
	if err := w.store.Delete(ctx, row); err != nil {
		return false, err
	}
	log.get().InfoContext(ctx, "row of a cleared run deleted; its dispatch dropped", "attempt", row.Attempt)
	return true, nil
}

// publishedAfter reports whether msg, a dispatch of the given-up run row,
// was published after the give-up: not the message that woke its last
// attempt, and stored after the row's finishedAt (by the server's clock,
// which the writer's should follow closely).
func publishedAfter(msg jetstream.Msg, row *model.Row) bool {
	meta, err := msg.Metadata()
	if err != nil {
		return false
	}
	return meta.Sequence.Stream > row.DispatchSeq && meta.Timestamp.After(row.FinishedAt)
}

// resumeGivenUp resumes the given-up run row for a dispatch published after its
// give-up (see engine.Runtime.Resume): a keyed run is queued again for its
// key (the key's promotion dispatches it: this message is dropped); any
// other is moved back to "starting" and claimed with this message on the
// next read (retry).
func (w *Worker) resumeGivenUp(ctx context.Context, log *slog.Logger, row *model.Row) (settle.Outcome, bool, error) {
	if row.ConcurrencyKey != "" {
		if _, err := keys.Requeue(ctx, w.rt, row); err != nil {
			return settle.Leave(), false, err
		}
		log.InfoContext(ctx, "given-up run queued again by a dispatch", "attempt", row.Attempt)
		return settle.Ack(), false, nil
	}
	if _, resumed, err := w.rt.Resume(ctx, row, false); err != nil {
		return settle.Leave(), false, err
	} else if resumed {
		log.InfoContext(ctx, "given-up run resumed by a dispatch", "attempt", row.Attempt)
	}
	return settle.Leave(), true, nil
}

// claim returns row claimed by this worker for a new attempt
// (model.Claimed), woken by msg, the message that now wakes a takeover.
func (w *Worker) claim(row *model.Row, msg jetstream.Msg, now time.Time) (*model.Row, error) {
	claimed := row.Clone()
	ev := model.Claimed{Worker: w.cfg.ID, Epoch: w.epoch(), DispatchSeq: wire.StreamSeq(msg)}
	if err := model.Apply(claimed, ev, now); err != nil {
		return nil, fmt.Errorf("worker: claim run %s: %w", row.ID, err)
	}
	return claimed, nil
}

// claimNew claims a run that has no row by creating its row claimed: one
// write instead of a create and a claim. done is false when another worker
// created the row first (err nil: read it) or the create failed (err); o
// settles the dispatch when done.
//
// With checkCleared (a plain publish's first delivery, whose tombstone
// nothing read yet) the tombstone is read beside the create, in the same
// round trip: a run cleared after the dispatch was published gets the
// row the create made deleted again, and is dropped, as if the tombstone
// had been read first. A tombstone that cannot be read leaves the
// dispatch for a retry, its row deleted too.
func (w *Worker) claimNew(ctx context.Context, agentType string, d events.Dispatch, msg jetstream.Msg, slot *pull.Slot, checkCleared bool) (o settle.Outcome, done bool, err error) {
	now := time.Now()
	newRun := model.NewRun
	if d.Parent == "" && d.Detached == nil {
		newRun = model.NewUnindexedRun // it needs nothing of the reconciler
	}
	row := newRun(agentType, d, wire.StreamSeq(msg), now)
	claimed, err := w.claim(row, msg, now)
	if err != nil {
		return settle.Leave(), false, err
	}
	e := w.newExecution(msg, row.ID, slot)
	if !w.register(e) {
		return settle.Retry(w.busyDelay()), true, nil // another delivery is being claimed here
	}
	if w.mayClaimLazily(row, msg) {
		w.executeLazily(ctx, e, nil, row, 0, claimed, checkCleared)
		return settle.Leave(), true, nil // the execution settled the dispatch
	}
	var (
		tomb       sync.WaitGroup
		cleared    bool
		clearedErr error
	)
	if checkCleared {
		tomb.Go(func() { cleared, clearedErr = w.store.Index().Cleared(ctx, row.ID, row.DispatchSeq) })
	}
	rev, err := w.store.Create(ctx, claimed)
	tomb.Wait()
	switch {
	case cleared && !errors.Is(err, runstore.ErrRunExists),
		err == nil && clearedErr != nil:
		// Registered until the row is gone: a delivery of the same id
		// meanwhile is not claimed here (register, adopt).
		defer w.unregister(e)
		return w.unclaimNew(ctx, claimed, msg, clearedErr), true, nil
	}
	if err != nil {
		w.unregister(e)
		if errors.Is(err, runstore.ErrRunExists) {
			return settle.Leave(), false, nil
		}
		w.leaveBehind(claimed.ID, leftover{attempt: claimed.Attempt, epoch: claimed.WorkerEpoch}) // the create may have landed
		return settle.Leave(), false, err
	}
	w.execute(ctx, e, claimed, rev)
	return settle.Leave(), true, nil // the execution settled the dispatch
}

// unclaimNew deletes the row claimNew may just have created for a run
// cleared after its dispatch was published (clearedErr nil; the create may
// have failed without an answer), or created for a run whose tombstone
// could not be read (clearedErr), and says how to settle the dispatch:
// dropped, or kept for a retry. A row that cannot be deleted is left
// claimed; the dispatch's next delivery finds it, reads the tombstone
// (clearedTakeover) and deletes it then.
func (w *Worker) unclaimNew(ctx context.Context, claimed *model.Row, msg jetstream.Msg, clearedErr error) settle.Outcome {
	if err := w.store.Delete(ctx, claimed); err != nil {
		w.fault(ctx, w.log, "delete the row of a cleared run", err, "run_id", claimed.ID)
		return settle.Retry(retryDelay(msg))
	}
	if clearedErr != nil {
		w.fault(ctx, w.log, "read the tombstone of a new run", clearedErr, "run_id", claimed.ID)
		w.ensure(ctx, clearedErr)
		return settle.Retry(retryDelay(msg))
	}
	w.log.InfoContext(ctx, "dispatch for a cleared run dropped", "run_id", claimed.ID)
	return settle.Ack()
}

// readRow reads the row of run id and, when it has none, whether the run
// was cleared after the dispatch msg was published (see
// runstore.Store.Cleared). first is the first read of a delivery; with parallel
// too, the two reads go out together: one round trip. A young dispatch
// whose run has no trace at all in the runs bucket was not cleared
// (runstore.Store.MissProvesUncleared): its tombstone is read only when
// the row's key shows a removal (a plain publish's first delivery then
// costs one read).
func (w *Worker) readRow(ctx context.Context, id string, msg jetstream.Msg, first, parallel bool) (row *model.Row, rev uint64, cleared bool, err error) {
	var (
		tomb    sync.WaitGroup
		tombErr error
	)
	seq := wire.StreamSeq(msg)
	both := first && parallel
	provable := both && w.store.MissProvesUncleared(storedAt(msg))
	if provable {
		both = false
	}
	if both {
		tomb.Go(func() { cleared, tombErr = w.store.Index().Cleared(ctx, id, seq) })
	}
	get := w.store.Get
	if first {
		// The first read: a miss leads to a create, whose compare-and-set
		// catches a replica that is behind; a read after that create lost
		// asks the leader.
		get = w.store.Lookup
	}
	row, rev, err = get(ctx, id)
	tomb.Wait()
	if !errors.Is(err, runstore.ErrRunNotFound) {
		return row, rev, false, err
	}
	if provable && errors.Is(err, runstore.ErrNoTrace) {
		return nil, 0, false, err
	}
	if !both {
		cleared, tombErr = w.store.Index().Cleared(ctx, id, seq)
	}
	if tombErr != nil {
		return nil, 0, false, tombErr
	}
	return nil, 0, cleared, err
}

// storedAt is when the server stored the dispatch msg (zero if unknown).
func storedAt(msg jetstream.Msg) time.Time {
	meta, err := msg.Metadata()
	if err != nil {
		return time.Time{}
	}
	return meta.Timestamp
}

// heldElsewhere reports whether a live worker other than this process's
// current attempt holds row, and until when it holds it unless it renews
// its liveness (runstore.Workers.HolderUntil). A row naming this worker
// under its current epoch with no attempt here is not held: this process
// knows it ran no such attempt any more.
func (w *Worker) heldElsewhere(ctx context.Context, row *model.Row) (held bool, until time.Time, err error) {
	if row.Worker == "" || row.Status.Final() {
		return false, time.Time{}, nil
	}
	if row.Worker == w.cfg.ID && row.WorkerEpoch == w.epoch() {
		return false, time.Time{}, nil
	}
	return w.store.Workers().HolderUntil(ctx, row)
}

// adopt attaches a redelivered dispatch to the execution of its run in this
// process, if there is one.
func (w *Worker) adopt(row *model.Row, msg jetstream.Msg) bool {
	if row.Worker != w.cfg.ID {
		return false
	}
	w.mu.Lock()
	e := w.active[row.ID]
	w.mu.Unlock()
	return e != nil && e.adopt(msg)
}

// endUnclaimed moves a run nobody executes to a final status; its dispatch
// is acknowledged once the final status event is stored.
func (w *Worker) endUnclaimed(ctx context.Context, row *model.Row, rev uint64,
	status events.Status, reason, text string) (o settle.Outcome, retry bool, err error) {
	final := row.Clone()
	if err := model.Apply(final, model.Ended{Status: status, Reason: reason, Error: text}, time.Now()); err != nil {
		return settle.Leave(), true, nil // final already: read it again
	}
	if _, err := w.store.Update(ctx, final, rev); errors.Is(err, runstore.ErrConflict) {
		return settle.Leave(), true, nil
	} else if err != nil {
		return settle.Leave(), false, err
	}
	final = w.countLostSteps(ctx, final) // its last attempt was lost
	if err := w.ensureFinalEvent(ctx, final); err != nil {
		return settle.Leave(), false, err
	}
	w.unindexIfSettled(ctx, final)
	w.advanceKey(ctx, final)
	return settle.Ack(), false, nil
}

// countLostSteps counts on a run that ended with no worker holding it what
// the steps of its lost attempt spent (engine.Runtime.CountLostSteps), and
// returns its row as it is now.
func (w *Worker) countLostSteps(ctx context.Context, row *model.Row) *model.Row {
	next, err := w.rt.CountLostSteps(ctx, row)
	if err != nil {
		w.fault(ctx, w.log, "count the stored steps of a run ended without its worker", err, "run_id", row.ID)
	}
	return next
}

// deriveRunID names a dispatch that carries no runId: its Nats-Msg-Id if it
// has one, else an id stable for the stream message.
func (w *Worker) deriveRunID(msg jetstream.Msg) (string, error) {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		if err := events.ValidateID(id); err != nil {
			return "", fmt.Errorf("dispatch has no runId and its Nats-Msg-Id cannot be one: %w", err)
		}
		return id, nil
	}
	meta, err := msg.Metadata()
	if err != nil {
		return "", fmt.Errorf("dispatch has no runId and no metadata: %w", err)
	}
	epoch, _ := w.streamEpoch.Load().(string)
	return wire.DerivedRunID(epoch, meta.Sequence.Stream), nil
}

// deadLetter files msg in the DLQ stream with the reason; the dispatch is
// then terminated. If the DLQ write fails the dispatch is kept (redelivered
// later): nothing is dropped.
func (w *Worker) deadLetter(ctx context.Context, msg jetstream.Msg, agentType string, kind DeadLetterReason, reason string) settle.Outcome {
	if _, err := w.js.PublishMsg(ctx, wire.DeadLetter(w.ns.DLQSubject(agentType), msg, reason)); err != nil {
		w.log.ErrorContext(ctx, "dead-letter dispatch; keeping it for a retry", "subject", msg.Subject(), "reason", reason, "err", err)
		return settle.Retry(retryDelay(msg))
	}
	w.log.WarnContext(ctx, "dispatch dead-lettered", "subject", msg.Subject(), "reason", reason)
	if w.cfg.Observer != nil {
		w.cfg.Observer.DispatchDeadLettered(agentType, kind)
	}
	return settle.Term(reason)
}

// deadLetterMalformed files a dispatch whose subject names no valid agent type.
func (w *Worker) deadLetterMalformed(ctx context.Context, msg jetstream.Msg) settle.Outcome {
	return w.deadLetter(ctx, msg, "", DeadLetterBadSubject, fmt.Sprintf(
		"subject %q does not name a single agent type (jetrun.dispatch.<agentType>)", msg.Subject()))
}
