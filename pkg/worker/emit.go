package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The publishing half of an execution: what Run's Chunk, Progress,
// Milestone, Wait and Call put on the run's timeline, numbered by the
// attempt's emitter and handed to its publisher (publisher.go), which
// fences and pipelines them.

// emitter numbers an attempt's events and publishes them in number order.
// turn, a one-slot queue taken with the caller's context, lets one
// numbered publish through at a time: its holder alone touches progressN,
// signalEvents, lastProgressAt and pending. mu guards what others read
// while a publish waits out a fault (the row sync's counts, Milestones,
// the flush timer) and is never held across a publish.
type emitter struct {
	id       string
	attempt  int
	pub      *publisher
	interval time.Duration // Config.ProgressInterval
	onTimer  func()        // the flush timer's function

	turn           chan struct{}
	progressN      int64
	signalEvents   int64 // numbers the signal events' message ids
	lastProgressAt time.Time
	pending        *events.Progress // a coalesced progress event awaiting its flush

	mu         sync.Mutex
	chunkSeq   int64
	milestones []events.Milestone
	flushTimer *time.Timer // flushes pending when its window ends
	stopped    bool        // the attempt ended: the timer is not armed again
}

func newEmitter(id string, attempt int, pub *publisher, interval time.Duration, onTimer func()) *emitter {
	return &emitter{id: id, attempt: attempt, pub: pub, interval: interval, onTimer: onTimer, turn: make(chan struct{}, 1)}
}

// take waits for the turn to publish, or for ctx.
func (m *emitter) take(ctx context.Context) error {
	select {
	case m.turn <- struct{}{}:
		return nil
	default:
	}
	select {
	case m.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (m *emitter) give() { <-m.turn }

// restore continues the numbering after what earlier attempts stored: the
// last chunk sequence and the milestones reached (loadHistory).
func (m *emitter) restore(chunkSeq int64, ms []events.Milestone) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.chunkSeq, m.milestones = chunkSeq, ms
}

// shown is what the row shows of the events emitted (model.Synced): the
// newest chunk sequence and milestone.
func (m *emitter) shown() (chunks int64, milestone events.Milestone) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.milestones); n > 0 {
		milestone = m.milestones[n-1]
	}
	return m.chunkSeq, milestone
}

// milestonesCopy returns the milestones reached, earlier attempts' included.
func (m *emitter) milestonesCopy() []events.Milestone {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]events.Milestone(nil), m.milestones...)
}

// chunk publishes raw as the run's next chunk, coalesced with the chunks
// around it within the chunk window (coalesce.go); it returns once the
// chunk is in its batch or in flight.
func (m *emitter) chunk(ctx context.Context, raw json.RawMessage) error {
	if err := m.take(ctx); err != nil {
		return err
	}
	defer m.give()
	m.mu.Lock()
	seq := m.chunkSeq + 1
	m.mu.Unlock()
	if err := m.pub.chunk(ctx, events.Chunk{RunID: m.id, Seq: seq, Data: raw, Attempt: m.attempt}); err != nil {
		return err
	}
	m.mu.Lock()
	m.chunkSeq = seq
	m.mu.Unlock()
	return nil
}

// progress publishes ev, coalesced: at once when the window since the
// last one ended at now (or it is complete), else as the pending event the
// flush timer publishes.
func (m *emitter) progress(ctx context.Context, ev events.Progress, now time.Time) error {
	if err := m.take(ctx); err != nil {
		return err
	}
	defer m.give()
	if ev.Fraction >= 1 || now.Sub(m.lastProgressAt) >= m.interval {
		m.pending = nil
		return m.publishProgress(ctx, ev)
	}
	first := m.pending == nil
	m.pending = &ev
	if first {
		m.schedule(time.Until(m.lastProgressAt.Add(m.interval)))
	}
	return nil
}

// milestone numbers ms after the milestones reached and publishes it; it
// returns once ms, and every event before it, is stored.
func (m *emitter) milestone(ctx context.Context, ms events.Milestone) (events.Milestone, error) {
	if err := m.take(ctx); err != nil {
		return events.Milestone{}, err
	}
	defer m.give()
	m.mu.Lock()
	ms.Sequence = 1
	if n := len(m.milestones); n > 0 {
		ms.Sequence = m.milestones[n-1].Sequence + 1
	}
	m.mu.Unlock()
	ms.At = time.Now()
	if _, err := m.pub.publish(ctx, events.KindMilestone, wire.MilestoneMsgID(m.id, ms.Sequence), ms, true); err != nil {
		return events.Milestone{}, err
	}
	m.mu.Lock()
	m.milestones = append(m.milestones, ms)
	m.mu.Unlock()
	return ms, nil
}

// signal puts a wait or a received signal on the run's timeline.
func (m *emitter) signal(ctx context.Context, ev events.SignalEvent) error {
	if err := m.take(ctx); err != nil {
		return err
	}
	defer m.give()
	m.signalEvents++
	ev.RunID, ev.Attempt, ev.At = m.id, m.attempt, time.Now()
	_, err := m.pub.publish(ctx, events.KindSignal,
		wire.SignalEventMsgID(m.id, m.attempt, ev.Name, ev.State, m.signalEvents), ev, false)
	return err
}

// call stores c, a call the attempt numbered (call.go), and returns its
// stream sequence.
func (m *emitter) call(ctx context.Context, c events.Call) (uint64, error) {
	if err := m.take(ctx); err != nil {
		return 0, err
	}
	defer m.give()
	return m.pub.publish(ctx, events.KindCall, wire.CallMsgID(m.id, c.Seq), c, true)
}

// schedule arms the timer that publishes the pending coalesced progress
// event when its window ends, in due.
func (m *emitter) schedule(due time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.stopped:
	case m.flushTimer == nil:
		m.flushTimer = time.AfterFunc(due, m.onTimer)
	default:
		m.flushTimer.Reset(due)
	}
}

// stopTimer stops the flush timer for good: the attempt ended.
func (m *emitter) stopTimer() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if m.flushTimer != nil {
		m.flushTimer.Stop()
	}
}

// flush publishes the pending coalesced progress event, if any.
func (m *emitter) flush(ctx context.Context) error {
	if err := m.take(ctx); err != nil {
		return err
	}
	defer m.give()
	if m.pending == nil {
		return nil
	}
	p := *m.pending
	m.pending = nil
	return m.publishProgress(ctx, p)
}

// publishProgress publishes p; the caller holds the turn.
func (m *emitter) publishProgress(ctx context.Context, p events.Progress) error {
	m.progressN++
	p.At = time.Now()
	if _, err := m.pub.publish(ctx, events.KindProgress, wire.ProgressMsgID(m.id, m.attempt, m.progressN), p, false); err != nil {
		return err
	}
	m.lastProgressAt = p.At
	return nil
}

// emitChunk publishes raw as the run's next chunk: a sign of life.
func (e *execution) emitChunk(ctx context.Context, raw json.RawMessage) error {
	if err := e.emit.chunk(ctx, raw); err != nil {
		return err
	}
	e.noteSignal(time.Now(), nil)
	return nil
}

// emitProgress records ev as the row's progress snapshot and publishes it,
// coalesced.
func (e *execution) emitProgress(ctx context.Context, ev events.Progress) error {
	now := time.Now()
	e.noteSignal(now, &jetruntype.ProgressSnapshot{Fraction: ev.Fraction, Phase: ev.Phase, Message: ev.Message, At: now})
	return e.emit.progress(ctx, ev, now)
}

// emitMilestone publishes m, numbered: a sign of life once stored.
func (e *execution) emitMilestone(ctx context.Context, m events.Milestone) (events.Milestone, error) {
	m, err := e.emit.milestone(ctx, m)
	if err != nil {
		return events.Milestone{}, err
	}
	e.noteSignal(m.At, nil)
	return m, nil
}

// timedFlush is the flush timer's function.
func (e *execution) timedFlush() {
	ctx := e.ctl.context()
	if err := e.emit.flush(ctx); err != nil && ctx.Err() == nil {
		e.w.fault(ctx, e.log, "flush progress", err)
	}
}

// encodePayload encodes a handler's value for an event of run id, within
// the size limit; what names it in errors ("chunk", "progress data" …).
func encodePayload(id, what string, v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("worker: %s of run %s is not JSON-encodable: %w", what, id, err)
	}
	if len(raw) > events.MaxChunkBytes {
		return nil, fmt.Errorf("worker: %s of run %s is %d bytes; the limit is %d: %w",
			what, id, len(raw), events.MaxChunkBytes, ErrTooLarge)
	}
	return raw, nil
}
