package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/pull"
	"github.com/jetrun/jetrun/internal/settle"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/kv"
)

// execution is one attempt of one run in this process: the handler call
// and the final write. It owns no goroutine while the handler waits: the
// worker's heart (heart.go) renews the worker's liveness for every run at
// once, heartbeats the dispatch and syncs the row; the worker's cancel
// follower cancels the handler.
type execution struct {
	w       *Worker
	id      string
	attempt int
	epoch   string // the worker's liveness epoch the attempt was claimed under
	log     *slog.Logger
	pub     *publisher

	// ctlMu guards the handler's context: cancel is set once it exists;
	// cancelled records a cancel that arrived before; ended, that the
	// attempt's outcome was written (by the handler's return or by the
	// heart giving a stuck handler up).
	ctlMu     sync.Mutex
	ctx       context.Context
	cancel    context.CancelCauseFunc
	cancelled bool
	stoppedAt time.Time // when the handler's context ended
	ended     bool
	lapsed    bool      // stopped by a lapse of the worker's liveness (Worker.lapse)
	begun     bool      // the attempt started: the heart tends it
	begunAt   time.Time // when it started
	outcome   string    // what ended it (RunEnd.Outcome), set by the outcome
	reason    string    // and its status reason
	lastBeat  time.Time // the last InProgress on the dispatch
	lastSync  time.Time // the last row sync

	// cur and rev are the newest row this execution knows of; curMu
	// serializes the execution's row writes.
	curMu sync.Mutex
	cur   *jetruntype.Run
	rev   uint64

	// The concurrency slot of the run's dispatch, given back while the
	// handler is parked (Run.Park, Run.Wait).
	parkMu sync.Mutex
	slot   *pull.Slot
	parked int

	msgMu    sync.Mutex
	msgs     []jetstream.Msg // deliveries of the run's dispatch to settle at the end
	released bool

	emitMu         sync.Mutex // orders sequence numbers with their publishes
	chunkSeq       int64
	milestones     []events.Milestone
	progressN      int64
	lastProgressAt time.Time
	pending        *events.Progress // a coalesced progress event awaiting its flush
	flushTimer     *time.Timer      // flushes pending when its window ends

	stateMu       sync.Mutex // row fields awaiting the next row sync
	dirty         bool
	snapshot      *jetruntype.ProgressSnapshot
	lastSignalAt  time.Time
	firstEventSeq uint64
	waitingFor    string            // the signal the handler waits for now
	signalsSeen   map[string]uint64 // signals received, not yet on the row
	signalEvents  int64             // numbers the signal events' message ids

	nest execNested // nested runs and calls (nested.go, call.go)
}

// newExecution prepares the attempt of a run the worker is about to claim;
// slot is the concurrency slot its dispatch holds.
func (w *Worker) newExecution(msg jetstream.Msg, id string, slot *pull.Slot) *execution {
	return &execution{w: w, id: id, msgs: []jetstream.Msg{msg}, slot: slot}
}

// park gives the run's concurrency slot back while the handler waits on
// something outside the process; the returned function takes one back
// (waiting for a free one). Parks nest.
func (e *execution) park() (unpark func(context.Context) error) {
	e.parkMu.Lock()
	defer e.parkMu.Unlock()
	if e.parked++; e.parked == 1 && e.slot != nil {
		e.slot.Release()
	}
	return func(ctx context.Context) error {
		e.parkMu.Lock()
		defer e.parkMu.Unlock()
		if e.parked--; e.parked > 0 || e.slot == nil || e.isEnded() {
			return nil // still parked, or the attempt is over: its slot went with it
		}
		return e.slot.Acquire(ctx)
	}
}

// execute runs an attempt the worker just claimed (row at revision rev). e
// is registered in w.active already (see claim).
func (w *Worker) execute(ctx context.Context, e *execution, row *jetruntype.Run, rev uint64) {
	defer w.unregister(e)
	e.attempt, e.epoch = row.Attempt, row.WorkerEpoch
	e.log = w.log.With("run_id", row.ID, "agent_type", row.AgentType, "attempt", row.Attempt)
	trace := row.Trace()
	if id := trace.TraceID(); id != "" {
		e.log = e.log.With("trace_id", id)
	}
	e.cur, e.rev = row, rev
	e.pub = &publisher{
		js: w.js, stream: w.eventsStream, store: w.store, ns: w.cfg.Namespace,
		runID: row.ID, worker: w.cfg.ID, attempt: row.Attempt,
		lost: e.lose, lapsed: e.lapse, until: w.holdsUntil, trace: trace,
	}

	hctx, cancel := context.WithCancelCause(withTrace(ctx, trace))
	defer cancel(nil)
	e.ctlMu.Lock()
	e.ctx, e.cancel = hctx, cancel
	lapsed := e.lapsed // the worker's liveness lapsed while the run was being claimed
	if e.cancelled || row.CancelRequested {
		cancel(ErrCancelled)
	}
	e.ctlMu.Unlock()
	if lapsed {
		e.lose()
		e.end(e.abandon)
		return
	}

	if err := e.start(hctx); err != nil {
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
	run := &Run{e: e, row: e.cur.Clone()} // before the heart may write e.cur
	e.ctlMu.Lock()
	e.begun, e.begunAt, e.lastBeat, e.lastSync = true, time.Now(), time.Now(), time.Now()
	e.ctlMu.Unlock()
	w.observeStart(e, row)

	result, herr, panicked := e.call(hctx, w.handlers[row.AgentType], run)
	e.end(func() { e.finish(hctx, result, herr, panicked) })
}

// end writes the attempt's outcome once: either when the handler returns,
// or when the heart gives up on a handler stuck past its context.
func (e *execution) end(outcome func()) {
	e.ctlMu.Lock()
	if e.ended {
		e.ctlMu.Unlock()
		return
	}
	e.ended = true
	e.ctlMu.Unlock()
	e.stopFlushTimer()
	outcome()
	e.w.observeEnd(e)
}

// setOutcome records what ended the attempt, for the Observer.
func (e *execution) setOutcome(outcome, reason string) {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	e.outcome, e.reason = outcome, reason
}

func (e *execution) isEnded() bool {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	return e.ended
}

// requestCancel cancels the handler (cause ErrCancelled), or remembers the
// cancel for when the handler starts.
func (e *execution) requestCancel() {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	e.cancelled = true
	if e.cancel != nil {
		e.cancel(ErrCancelled)
	}
}

// cancelWith ends the handler's context with cause (first cause wins).
func (e *execution) cancelWith(cause error) {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	if e.cancel != nil {
		e.cancel(cause)
	}
}

func (e *execution) firstMsg() jetstream.Msg {
	e.msgMu.Lock()
	defer e.msgMu.Unlock()
	return e.msgs[0]
}

// historyTimeout bounds reading what earlier attempts left.
const historyTimeout = 30 * time.Second

// start publishes "running", which fences off every earlier attempt (see
// publisher), then reads what those attempts left (a takeover), so chunk
// and milestone numbering continue after the last stored ones. It runs
// before the handler, so it reads e.cur, the claimed row, without a lock.
func (e *execution) start(ctx context.Context) error {
	takeover := e.attempt > 1 || e.cur.FirstEventSeq != 0
	if takeover {
		last, err := e.w.eventsStream.GetLastMsgForSubject(ctx, e.w.cfg.Namespace.RunSubject(e.id, events.KindStatus))
		switch {
		case err == nil:
			e.pub.fenceSeq = last.Sequence
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("read the last status event: %w", err)
		}
	}
	seq, err := e.pub.publish(ctx, events.KindStatus, events.StatusMsgID(e.id, e.attempt, events.StatusRunning),
		e.cur.StatusEvent(e.w.cfg.ID), true)
	if err != nil {
		return err
	}
	e.pub.mu.Lock()
	e.pub.fenceSeq = seq // our own "running" is the status event we stream after
	e.pub.mu.Unlock()
	if e.cur.FirstEventSeq == 0 {
		e.stateMu.Lock()
		e.firstEventSeq, e.dirty = seq, true
		e.stateMu.Unlock()
	}
	if takeover {
		hctx, cancel := context.WithTimeout(ctx, historyTimeout)
		defer cancel()
		return e.loadHistory(hctx)
	}
	return nil
}

// loadHistory reads the last chunk sequence and the milestones already
// reached. After our "running" event no earlier attempt can add to them.
func (e *execution) loadHistory(ctx context.Context) error {
	ns := e.w.cfg.Namespace
	m, err := e.w.eventsStream.GetLastMsgForSubject(ctx, ns.RunSubject(e.id, events.KindChunk))
	switch {
	case err == nil:
		var c events.Chunk
		if json.Unmarshal(m.Data, &c) == nil {
			e.chunkSeq = c.Seq
		}
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return fmt.Errorf("read the last chunk: %w", err)
	}
	// Milestones are read one direct get at a time (the next message on the
	// run's milestone subject), not through a consumer: a worker taking
	// over hundreds of runs at once must not open hundreds of consumers.
	subject := ns.RunSubject(e.id, events.KindMilestone)
	var ms []events.Milestone
	for seq := max(e.cur.FirstEventSeq, 1); ; {
		m, err := e.w.eventsStream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
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
	e.milestones = ms
	return nil
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

// finish records the attempt's outcome.
func (e *execution) finish(ctx context.Context, res Result, herr error, panicked bool) {
	cause := context.Cause(ctx) // nil while ctx is live
	switch {
	case errors.Is(cause, ErrLeaseLost) || errors.Is(herr, ErrLeaseLost) || e.pub.isFenced():
		e.abandon()
	case herr != nil && errors.Is(cause, ErrShuttingDown):
		e.handBack()
	case herr != nil && errors.Is(cause, ErrCancelled):
		e.finalize(events.StatusAborted, events.ReasonCancelled, "", nil)
	case panicked:
		e.finalize(events.StatusError, events.ReasonPanic, herr.Error(), nil)
	case herr != nil && errors.Is(herr, ErrRetry):
		e.retry(herr)
	case herr != nil:
		e.finalize(events.StatusError, events.ReasonHandlerError, herr.Error(), nil)
	default:
		e.complete(res)
	}
}

func cancelText(r *jetruntype.Run) string {
	if r.CancelReason != "" {
		return "cancelled: " + r.CancelReason
	}
	return "cancelled"
}

// complete validates the result and finalizes the run as completed.
func (e *execution) complete(res Result) {
	var output json.RawMessage
	if res.Output != nil {
		b, err := json.Marshal(res.Output)
		if err != nil {
			e.finalize(events.StatusError, events.ReasonHandlerError, "output is not JSON-encodable: "+err.Error(), nil)
			return
		}
		output = b
	}
	switch {
	case len(output) > events.MaxOutputBytes:
		e.finalize(events.StatusError, events.ReasonHandlerError,
			fmt.Sprintf("output is %d bytes; the limit is %d", len(output), events.MaxOutputBytes), nil)
	case len(res.Summary) > events.MaxSummaryBytes:
		e.finalize(events.StatusError, events.ReasonHandlerError,
			fmt.Sprintf("summary is %d bytes; the limit is %d", len(res.Summary), events.MaxSummaryBytes), nil)
	default:
		e.finalize(events.StatusCompleted, "", "", func(r *jetruntype.Run) { r.Summary, r.Output = res.Summary, output })
	}
}

// writeContext is for the writes that end an attempt: they must outlive a
// shutdown's cancellation of the handler context.
func writeContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), writeTimeout)
}

// finalize moves the run to a final status (the compare-and-set), publishes
// the status event, and acknowledges the dispatch. A cancel that lands on an
// interrupted run (the reconciler's teardown after a give-up) does not
// replace the give-up with "aborted": the row stays interrupted, with the
// child no longer running.
func (e *execution) finalize(status events.Status, reason, text string, set func(*jetruntype.Run)) {
	ctx, cancel := writeContext()
	defer cancel()
	// Everything the attempt published is stored before the run is final:
	// through faults, for as long as the worker holds its runs.
	dctx, dcancel := context.WithDeadline(context.Background(), later(e.w.holdsUntil(), time.Now().Add(writeTimeout)))
	err := e.drain(dctx)
	dcancel()
	if errors.Is(err, ErrLeaseLost) {
		e.abandon()
		return
	} else if err != nil {
		e.w.fault(ctx, e.log, "store the run's last events", err)
	}
	e.pub.fence()
	now := time.Now()
	teardown := false
	row, err := e.writeFinal(func(r *jetruntype.Run) error {
		if err := e.owned(r); err != nil {
			return err
		}
		e.applyState(r)
		if status == events.StatusAborted && r.Status == events.StatusInterrupted {
			teardown = true
			r.ChildStopped()
			return nil
		}
		teardown = false
		msg := text
		if status == events.StatusAborted && msg == "" {
			msg = cancelText(r)
		}
		r.End(status, reason, msg, now)
		if set != nil {
			set(r)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			e.abandon()
			return
		}
		// The lease runs out and another worker takes over; the dispatch is
		// left unacknowledged for exactly that.
		e.w.fault(ctx, e.log, "record run outcome", err, "status", status)
		return
	}
	if teardown {
		// The give-up's child has stopped: say so on the timeline (a replay
		// following the run ends here).
		msgID := events.StatusMsgID(e.id, row.Attempt, events.StatusInterrupted) + ".stopped"
		if err := kv.PublishStatus(ctx, e.w.js, e.w.cfg.Namespace, row, e.w.cfg.ID, msgID); err != nil {
			e.log.WarnContext(ctx, "publish child stopped", "err", err)
		}
	} else {
		if err := kv.PublishTransition(ctx, e.w.js, e.w.cfg.Namespace, row, e.w.cfg.ID); err != nil {
			// The row is final; a redelivery of the dispatch repairs the
			// event, the reconciler the finish.
			e.w.fault(ctx, e.log, "publish final status; leaving the dispatch for a repair", err)
			e.releaseMsgs(settle.Leave())
			return
		}
		e.w.unindexIfSettled(ctx, row)
	}
	e.setOutcome(string(row.Status), row.Reason)
	e.w.advanceKey(ctx, row)
	e.log.InfoContext(ctx, "run finished", "status", row.Status)
	e.releaseMsgs(settle.Ack())
}

// writeFinal writes the outcome, retrying failures with backoff for as long
// as the lease lasts (heartbeating the dispatch meanwhile), so a KV hiccup
// does not throw a finished result away.
func (e *execution) writeFinal(fn func(*jetruntype.Run) error) (*jetruntype.Run, error) {
	deadline := later(e.w.holdsUntil(), time.Now().Add(writeTimeout))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var row *jetruntype.Run
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond), backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0))
	err := backoff.Retry(func() error {
		e.heartbeat()
		r, err := e.write(ctx, fn)
		if errors.Is(err, ErrLeaseLost) {
			return backoff.Permanent(err)
		}
		row = r
		return err
	}, backoff.WithContext(b, ctx))
	return row, err
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// handBack releases the lease so another worker can take the run over at
// once, and returns the dispatch to the queue.
func (e *execution) handBack() {
	ctx, cancel := writeContext()
	defer cancel()
	_ = e.drain(ctx)
	e.pub.fence()
	_, err := e.write(ctx, func(r *jetruntype.Run) error {
		if err := e.owned(r); err != nil {
			return err
		}
		e.applyState(r)
		r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
		r.Handoffs++
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			e.abandon()
			return
		}
		e.log.WarnContext(ctx, "release lease; the run is taken over when it expires", "err", err)
	}
	e.setOutcome(OutcomeHandedBack, "")
	e.log.InfoContext(ctx, "run handed back")
	e.releaseMsgs(settle.Retry(0)) // immediate redelivery to another worker
}

// release gives the run up after a failure to start it: the run is
// released (the failure was the infrastructure's, not a lost worker's, so
// it counts as a hand-off, not against MaxAttempts) and the dispatch comes
// back after delay, so a broken stream does not make workers spin.
//
// The release is retried through transient faults for as long as the
// worker holds its runs (writeFinal): a release that did not land would
// leave the attempt counted as a lost worker's.
func (e *execution) release(delay time.Duration) {
	ctx, cancel := writeContext()
	defer cancel()
	e.pub.fence()
	if _, err := e.writeFinal(func(r *jetruntype.Run) error {
		if err := e.owned(r); err != nil {
			return err
		}
		r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
		r.Handoffs++
		return nil
	}); err != nil && !errors.Is(err, ErrLeaseLost) {
		e.log.WarnContext(ctx, "release lease; the run is taken over when it expires", "err", err)
	}
	e.setOutcome(OutcomeReleased, "")
	e.releaseMsgs(settle.Retry(delay))
}

// abandon gives up an attempt that no longer holds the run. The dispatch is
// acknowledged only if the run is final; otherwise it belongs to the new
// holder. An attempt stopped by a lapse of the worker's liveness waits
// until the worker is back: if it resumed its epoch and the row still
// names the attempt, the run is handed off (handOffLapsed).
func (e *execution) abandon() {
	e.pub.fence()
	if (e.isLapsed() || e.pub.livenessRanOut()) && e.w.awaitLiveness(e.epoch) && e.handOffLapsed() {
		return
	}
	ctx, cancel := writeContext()
	defer cancel()
	row, _, err := e.w.store.Get(ctx, e.id)
	if err == nil && row.Status.Final() {
		// Ended elsewhere, or by our own final write whose answer was lost:
		// make sure its status event and finish exist before the ack.
		if err := e.w.ensureFinalEvent(ctx, row); err != nil {
			e.log.WarnContext(ctx, "announce final status; leaving the dispatch for a repair", "err", err)
			e.releaseMsgs(settle.Leave())
			return
		}
		e.setOutcome(OutcomeEndedElsewhere, "")
		e.log.InfoContext(ctx, "run ended elsewhere; attempt stopped")
		e.releaseMsgs(settle.Ack())
		return
	}
	if errors.Is(err, kv.ErrRunNotFound) {
		e.setOutcome(OutcomeEndedElsewhere, "")
		e.log.InfoContext(ctx, "run cleared; attempt stopped")
		e.releaseMsgs(settle.Ack())
		return
	}
	e.setOutcome(OutcomeLeaseLost, "")
	// When the worker's liveness lapses every attempt stops at once: one
	// line per interval says so, with the count of the others.
	e.w.logs.Log(ctx, e.log, slog.LevelWarn, "lease lost", "lease lost; attempt stopped")
	e.releaseMsgs(settle.Leave())
}

// handOffLapsed releases a run whose attempt a lapse of the worker's
// liveness stopped, once the worker is back with the same epoch, and
// returns its dispatch to the queue: the attempt is recorded as a blink,
// a hand-off, so it does not count against MaxAttempts (the process lived
// on; no worker was lost). It reports false when the row no longer names
// the attempt (taken over, ended, cleared): abandon goes on as for any lost
// attempt.
func (e *execution) handOffLapsed() bool {
	ctx, cancel := writeContext()
	defer cancel()
	_, err := e.write(ctx, func(r *jetruntype.Run) error {
		if err := e.owned(r); err != nil || r.WorkerEpoch != e.epoch {
			return ErrLeaseLost
		}
		e.applyState(r)
		r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
		r.RefundBlink(e.attempt)
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrLeaseLost) {
			e.w.fault(ctx, e.log, "hand off a run after a liveness lapse; it is taken over later", err)
		}
		return false
	}
	e.setOutcome(OutcomeLeaseLost, "")
	e.w.logs.Log(ctx, e.log, slog.LevelInfo, "handed off after a lapse", "run handed off after a lapse of the worker's liveness")
	e.releaseMsgs(settle.Retry(0)) // at once, to any worker
	return true
}

// drain publishes a pending coalesced progress event and waits until every
// event of the attempt is stored.
func (e *execution) drain(ctx context.Context) error {
	if e.pub.isFenced() {
		return nil
	}
	if err := e.flushProgress(ctx); err != nil {
		return err
	}
	return e.pub.flush(ctx)
}

// owned fences a row write: only the holding attempt of a live run may write.
func (e *execution) owned(r *jetruntype.Run) error {
	if !r.HeldBy(e.w.cfg.ID, e.attempt) || r.Status.Final() {
		return ErrLeaseLost
	}
	return nil
}

// write applies fn to the newest known row and stores it with a
// compare-and-set, falling back to a re-read (kv.Store.MutateFrom).
func (e *execution) write(ctx context.Context, fn func(*jetruntype.Run) error) (*jetruntype.Run, error) {
	e.curMu.Lock()
	defer e.curMu.Unlock()
	row, rev, err := e.w.store.MutateFrom(ctx, e.id, e.cur, e.rev, fn)
	if errors.Is(err, kv.ErrRunNotFound) {
		return nil, ErrLeaseLost // cleared
	}
	if err != nil {
		return nil, err
	}
	e.cur, e.rev = row, rev
	return row, nil
}

// adopt records another delivery of this run's dispatch.
func (e *execution) adopt(msg jetstream.Msg) bool {
	e.msgMu.Lock()
	defer e.msgMu.Unlock()
	if e.released {
		return false
	}
	e.msgs = append(e.msgs, msg)
	return true
}

// releaseMsgs settles every delivery of the run's dispatch as o says
// (settle.Leave leaves them to redelivery) and stops adopting new ones.
func (e *execution) releaseMsgs(o settle.Outcome) {
	e.msgMu.Lock()
	defer e.msgMu.Unlock()
	e.released = true
	for _, m := range e.msgs {
		e.w.settle(context.Background(), e.log, m, o)
	}
}

// heartbeat tells the server the dispatch is still being worked on.
func (e *execution) heartbeat() {
	e.msgMu.Lock()
	defer e.msgMu.Unlock()
	for _, m := range e.msgs {
		_ = m.InProgress()
	}
}

func decodeStatus(data []byte) (events.StatusEvent, error) {
	var s events.StatusEvent
	err := json.Unmarshal(data, &s)
	return s, err
}
