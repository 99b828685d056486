package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The publishing half of an execution: what Run's Chunk, Progress,
// Milestone and Wait put on the run's timeline, numbered under emitMu and
// handed to the attempt's publisher (publisher.go), which fences and
// pipelines them.

// emitChunk publishes raw as the run's next chunk (numbered under emitMu),
// coalesced with the chunks around it within the chunk window
// (coalesce.go); it returns once the chunk is in its batch or in flight.
func (e *execution) emitChunk(ctx context.Context, raw json.RawMessage) error {
	e.emitMu.Lock()
	seq := e.chunkSeq + 1
	err := e.pub.chunk(ctx, events.Chunk{RunID: e.id, Seq: seq, Data: raw, Attempt: e.attempt})
	if err == nil {
		e.chunkSeq = seq
	}
	e.emitMu.Unlock()
	if err != nil {
		return err
	}
	e.showEmitted(seq, events.Milestone{})
	e.noteSignal(time.Now(), nil)
	return nil
}

// emitProgress records ev as the row's progress snapshot and publishes it,
// coalesced: at once when the window since the last one ended (or it is
// complete), else as the pending event the flush timer publishes.
func (e *execution) emitProgress(ctx context.Context, ev events.Progress) error {
	now := time.Now()
	e.noteSignal(now, &jetruntype.ProgressSnapshot{Fraction: ev.Fraction, Phase: ev.Phase, Message: ev.Message, At: now})

	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	if ev.Fraction >= 1 || now.Sub(e.lastProgressAt) >= e.w.cfg.ProgressInterval {
		e.pending = nil
		return e.publishProgressLocked(ctx, ev)
	}
	first := e.pending == nil
	e.pending = &ev
	if first {
		e.scheduleFlushLocked()
	}
	return nil
}

// emitMilestone numbers m after the milestones reached and publishes it;
// it returns once m, and every event before it, is stored.
func (e *execution) emitMilestone(ctx context.Context, m events.Milestone) (events.Milestone, error) {
	e.emitMu.Lock()
	m.Sequence = 1
	if n := len(e.milestones); n > 0 {
		m.Sequence = e.milestones[n-1].Sequence + 1
	}
	m.At = time.Now()
	_, err := e.pub.publish(ctx, events.KindMilestone, wire.MilestoneMsgID(e.id, m.Sequence), m, true)
	if err == nil {
		e.milestones = append(e.milestones, m)
	}
	e.emitMu.Unlock()
	if err != nil {
		return events.Milestone{}, err
	}
	e.showEmitted(0, m)
	e.noteSignal(m.At, nil)
	return m, nil
}

// showEmitted records, for the row (synced), the newest chunk sequence
// and milestone emitted: under stateMu, so a row sync never waits for
// emitMu, which an emit holds while its publish waits out a fault.
func (e *execution) showEmitted(chunk int64, m events.Milestone) {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	e.shownChunks = max(e.shownChunks, chunk)
	if m.Sequence > e.shownMilestone {
		e.shownMilestone, e.shownMilestoneName = m.Sequence, m.Name
	}
}

// milestonesCopy returns the milestones reached, earlier attempts' included.
func (e *execution) milestonesCopy() []events.Milestone {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	return append([]events.Milestone(nil), e.milestones...)
}

// publishSignalEvent puts a wait or a received signal on the run's timeline.
func (e *execution) publishSignalEvent(ctx context.Context, ev events.SignalEvent) error {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	e.signalEvents++
	ev.RunID, ev.Attempt, ev.At = e.id, e.attempt, time.Now()
	_, err := e.pub.publish(ctx, events.KindSignal,
		wire.SignalEventMsgID(e.id, e.attempt, ev.Name, ev.State, e.signalEvents), ev, false)
	return err
}

// scheduleFlushLocked arms the timer that publishes the pending coalesced
// progress event when its window ends; emitMu must be held.
func (e *execution) scheduleFlushLocked() {
	due := time.Until(e.lastProgressAt.Add(e.w.cfg.ProgressInterval))
	if e.flushTimer == nil {
		e.flushTimer = time.AfterFunc(due, e.timedFlush)
		return
	}
	e.flushTimer.Reset(due)
}

// timedFlush is the flush timer's function.
func (e *execution) timedFlush() {
	ctx := e.ctl.context()
	if err := e.flushProgress(ctx); err != nil && ctx.Err() == nil {
		e.w.fault(ctx, e.log, "flush progress", err)
	}
}

func (e *execution) stopFlushTimer() {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	if e.flushTimer != nil {
		e.flushTimer.Stop()
	}
}

// flushProgress publishes the pending coalesced progress event, if any.
func (e *execution) flushProgress(ctx context.Context) error {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	if e.pending == nil {
		return nil
	}
	p := *e.pending
	e.pending = nil
	return e.publishProgressLocked(ctx, p)
}

// publishProgressLocked publishes p; emitMu must be held.
func (e *execution) publishProgressLocked(ctx context.Context, p events.Progress) error {
	e.progressN++
	p.At = time.Now()
	if _, err := e.pub.publish(ctx, events.KindProgress, wire.ProgressMsgID(e.id, e.attempt, e.progressN), p, false); err != nil {
		return err
	}
	e.lastProgressAt = p.At
	return nil
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
