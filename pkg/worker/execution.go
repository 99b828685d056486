package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// execution is one attempt of one run in this process: the handler call
// and the final write. It owns no goroutine while the handler waits: the
// worker's heart (heart.go) renews the worker's liveness for every run at
// once, heartbeats the dispatch and syncs the row; the worker's cancel
// follower cancels the handler.
//
// Its state lives in parts that each own their lock and never call out
// holding it (the package doc lists them); the execution composes them
// and holds only what is set once, before the handler runs.
type execution struct {
	w       *Worker
	id      string
	attempt int
	epoch   string // the worker's liveness epoch the attempt was claimed under
	log     *slog.Logger
	row     *model.Row // the row as the attempt started, its Run's (read-only)
	pub     *publisher // fenced, pipelined publishes (publisher.go)

	ctl     attemptCtl  // the handler's context, begun and ended (ctl.go)
	rw      *rowWriter  // the newest row known and the fields awaiting a write (row.go)
	emit    *emitter    // event numbering (emit.go)
	dlv     *deliveries // the deliveries of the run's dispatch (deliveries.go)
	parking *parking    // the concurrency slot of the run's dispatch (parking.go)
	nest    execNested  // nested runs and calls (nested.go, call.go)
	use     execUsage   // usage reports (usage.go)
	holds   execHolds   // reservations (holds.go)
	lims    execLimits  // grants on provider limits (limits.go)

	resting atomic.Bool // left out of the heart's beats until woken (rest.go)

	storedSteps []events.Step // the steps earlier attempts stored, read by start (step.go)
	lz          *lazyClaim    // the claim not written yet of a short run's first attempt (lazy.go); nil: claimed
}

// newExecution prepares the attempt of a run the worker is about to claim;
// slot is the concurrency slot its dispatch holds.
func (w *Worker) newExecution(msg jetstream.Msg, id string, slot *pull.Slot) *execution {
	e := &execution{w: w, id: id, dlv: newDeliveries(msg), parking: newParking(slot)}
	e.parking.woke = e.wake
	return e
}

// execute runs an attempt the worker just claimed (row at revision rev). e
// is registered in w.active already (see claim).
func (w *Worker) execute(ctx context.Context, e *execution, row *model.Row, rev uint64) {
	defer w.unregister(e)
	e.attempt, e.epoch = row.Attempt, row.WorkerEpoch
	e.log = w.log.With("run_id", row.ID, "agent_type", row.AgentType, "attempt", row.Attempt)
	trace := row.Trace()
	if id := trace.TraceID(); id != "" {
		e.log = e.log.With("trace_id", id)
	}
	e.rw = newRowWriter(w.store, row, rev)
	e.rw.woke = e.wake
	e.rw.pending = e.lz != nil
	e.pub = &publisher{
		js: w.js, stream: w.rt.EventsStreamFor(row.ID), streams: len(w.rt.EventsStreams()), store: w.store, ns: w.ns,
		runID: row.ID, worker: w.cfg.ID, attempt: row.Attempt, window: &w.eventWindow,
		lost: e.lose, lapsed: e.lapse, until: w.holdsUntil, trace: trace,
		chunks: chunkBatch{window: w.cfg.ChunkWindow}, woke: e.wake,
	}
	e.emit = newEmitter(row.ID, row.Attempt, e.pub, w.cfg.ProgressInterval, e.timedFlush)

	hctx, cancel := context.WithCancelCause(withTrace(ctx, trace))
	defer cancel(nil)
	// The heart must see a resting run whose context ended (rest.go).
	wakeCancel := func(cause error) { cancel(cause); e.wake() }
	if e.ctl.open(hctx, wakeCancel, row.Attempt, row.CancelRequested) {
		// The worker's liveness lapsed while the run was being claimed.
		e.lose()
		e.end(e.abandon)
		return
	}

	// A run not claimed yet has nothing to start (lazy.go).
	if err := e.startClaimed(hctx); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			e.end(e.abandon)
			return
		}
		w.fault(ctx, e.log, "start run; releasing it for a later retry", err)
		w.ensure(ctx, err)
		e.end(func() { e.release(retryDelay(e.firstMsg())) })
		return
	}
	e.log.DebugContext(ctx, "run started")
	e.row = e.rw.row() // read-only, as the rowWriter's: a write replaces it
	run := &Run{b: e, row: e.row}
	e.armClaim(hctx) // a run not claimed yet claims it when its window passes (lazy.go)
	e.rw.startClock(time.Now())
	e.ctl.begin(time.Now())
	e.dlv.startBeats(time.Now())
	w.observeStart(e, row)

	// Nothing of the claimed row is used once the handler runs but e.row,
	// the same row: a run waiting for hours keeps one copy.
	h, ending := w.handlers[row.AgentType], w.ending[row.AgentType]
	result, herr, panicked := e.call(hctx, h, run)
	defer e.leaveSlot(ending)()
	e.end(func() { e.finish(hctx, result, herr, panicked) })
}

// leaveSlot gives the attempt's concurrency slot back once its handler has
// returned, so the fetch loop takes the next dispatch while the attempt
// writes its end: its last events, its final row and status event, round
// trips no handler waits for. At most Concurrency attempts of an agent
// type end outside their slots at once (ending counts them); past that an
// attempt keeps its slot to the end, so a process holds at most twice
// Concurrency runs of an agent type. The returned function is called once
// the attempt has ended.
func (e *execution) leaveSlot(ending chan struct{}) (ended func()) {
	select {
	case ending <- struct{}{}:
	default:
		return func() {}
	}
	e.parking.leave()
	return func() { <-ending }
}

// end writes the attempt's outcome once: either when the handler returns,
// or when the heart gives up on a handler stuck past its context.
func (e *execution) end(outcome func()) {
	if !e.ctl.end() {
		return
	}
	e.parking.end()
	e.emit.stopTimer()
	outcome()
	e.w.observeEnd(e)
}

// startClaimed starts an attempt that claimed its run at its start.
func (e *execution) startClaimed(ctx context.Context) error {
	if e.lz != nil {
		return nil
	}
	return e.start(ctx)
}

// historyTimeout bounds reading what earlier attempts left.
const historyTimeout = 30 * time.Second

// start publishes "running", which fences off every earlier attempt (see
// publisher), then reads what those attempts left (a takeover), so chunk
// and milestone numbering continue after the last stored ones. It runs
// before the handler: the row it reads is the claimed row.
//
// A first attempt that never waited queued has nothing to read: its
// "running" is the run's first event and no earlier attempt can write
// after it. Its handler starts without waiting for "running" to be stored
// (publisher.open): the attempt's next event, a flush, and its end wait
// for it, so no other event of the attempt is sent under an unknown fence
// and the run is never made final without it. The claim is on the row
// already, so the event never claims what the row does not record.
func (e *execution) start(ctx context.Context) error {
	claimed := e.rw.row()
	takeover := e.attempt > 1 || claimed.FirstEventSeq != 0
	msgID := wire.StatusMsgID(e.id, e.attempt, events.StatusRunning)
	if !takeover && claimed.ConcurrencyKey == "" {
		e.pub.opened = e.rw.setFirstEvent
		return e.pub.open(ctx, msgID, claimed.StatusEvent(e.w.cfg.ID))
	}
	if takeover {
		last, err := e.w.rt.EventsStreamFor(e.id).GetLastMsgForSubject(ctx, e.w.ns.RunSubject(e.id, events.KindStatus))
		switch {
		case err == nil:
			e.pub.fenceSeq = last.Sequence
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("read the last status event: %w", err)
		}
	}
	seq, err := e.pub.publish(ctx, events.KindStatus, msgID, claimed.StatusEvent(e.w.cfg.ID), true)
	if err != nil {
		return err
	}
	e.pub.mu.Lock()
	e.pub.fenceSeq = seq // our own "running" is the status event we stream after
	e.pub.mu.Unlock()
	if claimed.FirstEventSeq == 0 {
		first, err := e.firstEvent(ctx, claimed, seq)
		if err != nil {
			return err
		}
		e.rw.setFirstEvent(first)
	}
	if takeover {
		hctx, cancel := context.WithTimeout(ctx, historyTimeout)
		defer cancel()
		return e.loadHistory(hctx, claimed)
	}
	return nil
}

// firstEvent returns the stream sequence of the run's first stored event,
// given running, that of our own "running" event. A first attempt's
// "running" is its run's first event unless the run waited queued (its
// "queued" event came first); otherwise an earlier attempt stored events
// and may have died before its row recorded where they begin (the row
// sync writes it), so the first one is looked up: one direct get of the
// next message on the run's subjects from the stream's start, which the
// server answers from its per-subject index rather than by a scan. Only a
// row without the sequence pays for it, never a short run's first attempt.
func (e *execution) firstEvent(ctx context.Context, claimed *model.Row, running uint64) (uint64, error) {
	if e.attempt <= 1 && claimed.ConcurrencyKey == "" {
		return running, nil
	}
	m, err := e.w.rt.EventsStreamFor(e.id).GetMsg(ctx, 1, jetstream.WithGetMsgSubject(e.w.ns.RunWildcard(e.id)))
	if err != nil {
		return 0, fmt.Errorf("read the run's first event: %w", err)
	}
	return min(m.Sequence, running), nil
}

// loadHistory reads the last chunk sequence, the milestones already
// reached and the steps stored, and counts the usage of stored steps the
// row does not count yet (startSteps). After our "running" event no
// earlier attempt can add to them.
func (e *execution) loadHistory(ctx context.Context, claimed *model.Row) error {
	ns := e.w.ns
	var chunkSeq int64
	m, err := e.w.rt.EventsStreamFor(e.id).GetLastMsgForSubject(ctx, ns.RunSubject(e.id, events.KindChunk))
	switch {
	case err == nil:
		var c events.Chunk
		if json.Unmarshal(m.Data, &c) == nil {
			chunkSeq = c.LastSeq() // a coalesced event's last chunk
		}
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return fmt.Errorf("read the last chunk: %w", err)
	}
	// Milestones are read one direct get at a time (the next message on the
	// run's milestone subject), not through a consumer: a worker taking
	// over hundreds of runs at once must not open hundreds of consumers.
	subject := ns.RunSubject(e.id, events.KindMilestone)
	var ms []events.Milestone
	first := cmp.Or(e.rw.firstEvent(), 1)
	for seq := first; ; {
		m, err := e.w.rt.EventsStreamFor(e.id).GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fmt.Errorf("read milestones: %w", err)
		}
		seq = m.Sequence + 1
		var ms1 events.Milestone
		if err := json.Unmarshal(m.Data, &ms1); err != nil {
			e.log.WarnContext(ctx, "skip a malformed milestone event", "seq", m.Sequence, "err", err)
			continue
		}
		if n := len(ms); n == 0 || ms1.Sequence > ms[n-1].Sequence { // numbered 1, 2, 3…: skip a duplicate
			ms = append(ms, ms1)
		}
	}
	e.emit.restore(chunkSeq, ms)
	steps, err := e.readSteps(ctx, first)
	if err != nil {
		return err
	}
	e.storedSteps = steps
	return e.startSteps(ctx, claimed, steps)
}

// call runs the handler, turning a panic into an error.
func (e *execution) call(ctx context.Context, h Handler, run *Run) (res Result, err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			err = fmt.Errorf("panic: %v", p)
			e.log.ErrorContext(ctx, "handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	res, err = h.ServeRun(ctx, run)
	return res, err, false
}

// lose stops the attempt: no more writes, handler cancelled.
func (e *execution) lose() {
	e.pub.halt()
	e.ctl.cancelWith(ErrLeaseLost)
}

// lapse stops the attempt because the worker's liveness lapsed (see
// Worker.lapse): as lose, and abandon hands the run off once the worker is
// back. An execution still being claimed is stopped when execute starts.
func (e *execution) lapse() {
	if e.ctl.lapse() { // e.pub is set before the handler's context
		e.lose()
	}
}
