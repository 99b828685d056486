package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/worker/internal/runhook"
)

// MaxMilestoneNameLength bounds milestone names.
const MaxMilestoneNameLength = 256

// Run is a handler's view of the run it executes. Its methods are safe for
// concurrent use. After the handler returns they fail with ErrLeaseLost.
//
// Package workertest builds a Run that records what a handler does, for unit
// tests of handlers without a NATS server.
type Run struct {
	e   *execution
	row *jetruntype.Run
	// fake, when set (workertest), receives the calls instead of e.
	fake runhook.Backend
}

func init() {
	runhook.NewRun = func(row *jetruntype.Run, b runhook.Backend) any { return &Run{row: row, fake: b} }
}

// ID returns the run id.
func (r *Run) ID() string { return r.row.ID }

// AgentType returns the run's agent type.
func (r *Run) AgentType() string { return r.row.AgentType }

// Attempt returns the attempt number: 1 for the first worker, more after a
// takeover.
func (r *Run) Attempt() int { return r.row.Attempt }

// Parent returns the id of the run that dispatched this one, if any.
func (r *Run) Parent() string { return r.row.Parent }

// Depth returns how deep this run is nested under other runs (0 at the top).
func (r *Run) Depth() int { return r.row.Depth }

// Input returns the run's raw JSON input.
func (r *Run) Input() json.RawMessage { return r.row.Input }

// Row returns a copy of the run's row as it was when this attempt started.
func (r *Run) Row() *jetruntype.Run { return r.row.Clone() }

// Logger returns a logger carrying the run id, agent type and attempt.
func (r *Run) Logger() *slog.Logger {
	if r.fake != nil {
		return r.fake.Logger()
	}
	return r.e.log
}

// Milestones returns the milestones already reached, by earlier attempts
// included, so a handler that took a run over can skip finished work.
func (r *Run) Milestones() []events.Milestone {
	if r.fake != nil {
		return r.fake.Milestones()
	}
	return r.e.milestonesCopy()
}

// Chunk appends data (any JSON-encodable value; a string stays a string) to
// the run's streamed output. Chunks get sequence numbers 1, 2, 3… in the
// order of the calls. Chunk returns once the chunk is on its way: chunks are
// pipelined (a bounded window is in flight), so a chunk that cannot be
// stored (the run was taken over: ErrLeaseLost) fails a later call, or
// Flush; everything is stored before the run ends.
func (r *Run) Chunk(ctx context.Context, data any) error {
	if r.fake != nil {
		raw, err := encodePayload(r.row.ID, "chunk", data)
		if err != nil {
			return err
		}
		return r.fake.Chunk(ctx, raw)
	}
	e := r.e
	raw, err := e.encodePayload("chunk", data)
	if err != nil {
		return err
	}
	e.emitMu.Lock()
	seq := e.chunkSeq + 1
	_, err = e.pub.publish(ctx, events.KindChunk, events.ChunkMsgID(e.id, seq),
		events.Chunk{RunID: e.id, Seq: seq, Data: raw, Attempt: e.attempt}, false)
	if err == nil {
		e.chunkSeq = seq
	}
	e.emitMu.Unlock()
	if err != nil {
		return err
	}
	e.noteSignal(time.Now(), nil)
	return nil
}

// Progress reports progress. Reports are coalesced: at most one progress
// event per ProgressInterval goes out, and the latest one is flushed when the
// window ends; a report with Fraction ≥ 1 goes out at once. The row keeps the
// latest snapshot (without Data).
func (r *Run) Progress(ctx context.Context, p Progress) error {
	if r.fake != nil {
		fp := runhook.Progress{Fraction: min(max(p.Fraction, 0), 1), Phase: p.Phase, Message: p.Message}
		if p.Data != nil {
			raw, err := encodePayload(r.row.ID, "progress data", p.Data)
			if err != nil {
				return err
			}
			fp.Data = raw
		}
		return r.fake.Progress(ctx, fp)
	}
	e := r.e
	ev := events.Progress{
		RunID:    e.id,
		Fraction: min(max(p.Fraction, 0), 1),
		Phase:    p.Phase,
		Message:  p.Message,
		Attempt:  e.attempt,
	}
	if p.Data != nil {
		raw, err := e.encodePayload("progress data", p.Data)
		if err != nil {
			return err
		}
		ev.Data = raw
	}
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

// Milestone records that the run reached a named point. Milestones are
// durable (never coalesced; Milestone returns once it, and every event
// before it, is stored), numbered 1, 2, 3… per run across attempts, and
// deduplicated by Nats-Msg-Id <runId>.m.<sequence>.
func (r *Run) Milestone(ctx context.Context, name string, data any) (events.Milestone, error) {
	e := r.e
	if name == "" || len(name) > MaxMilestoneNameLength {
		return events.Milestone{}, fmt.Errorf("worker: milestone name must be 1 to %d bytes, got %d",
			MaxMilestoneNameLength, len(name))
	}
	if r.fake != nil {
		var raw json.RawMessage
		if data != nil {
			var err error
			if raw, err = encodePayload(r.row.ID, "milestone data", data); err != nil {
				return events.Milestone{}, err
			}
		}
		return r.fake.Milestone(ctx, name, raw)
	}
	m := events.Milestone{RunID: e.id, Name: name, Attempt: e.attempt}
	if data != nil {
		raw, err := e.encodePayload("milestone data", data)
		if err != nil {
			return events.Milestone{}, err
		}
		m.Data = raw
	}
	e.emitMu.Lock()
	m.Sequence = 1
	if n := len(e.milestones); n > 0 {
		m.Sequence = e.milestones[n-1].Sequence + 1
	}
	m.At = time.Now()
	_, err := e.pub.publish(ctx, events.KindMilestone, events.MilestoneMsgID(e.id, m.Sequence), m, true)
	if err == nil {
		e.milestones = append(e.milestones, m)
	}
	e.emitMu.Unlock()
	if err != nil {
		return events.Milestone{}, err
	}
	e.noteSignal(m.At, nil)
	return m, nil
}

// Flush returns once every event the handler published so far is stored,
// or the error that stopped one (ErrLeaseLost: the run was taken over).
func (r *Run) Flush(ctx context.Context) error {
	if r.fake != nil {
		return r.fake.Flush(ctx)
	}
	e := r.e
	if err := e.flushProgress(ctx); err != nil {
		return err
	}
	return e.pub.flush(ctx)
}

// Park runs wait, something that only waits on what happens outside this
// process (a person, another run: awaiting a nested run of the same agent
// type, say), with the run's concurrency slot given back meanwhile: the
// worker takes other runs while this one is parked, and the run takes a
// slot again when wait returns (it waits for one, or for ctx). The run keeps
// its worker and its place; only the slot is lent out. Wait parks by
// itself.
func (r *Run) Park(ctx context.Context, wait func(ctx context.Context) error) error {
	if r.fake != nil {
		return r.fake.Park(ctx, wait)
	}
	unpark := r.e.park()
	err := wait(ctx)
	if uerr := unpark(ctx); uerr != nil && err == nil {
		err = uerr
	}
	return err
}

// Wait parks the handler until a signal named name is sent to the run, and
// returns its payload. Signals are durable: one sent before Wait is called,
// or while the run's worker was being replaced, is not lost. While waiting,
// the run's row shows waitingFor = name and the no-progress budget does not
// run. A signal is delivered at least once: an attempt that received it and
// died before the row recorded it gives it to the next attempt again.
//
// Send signals with parent.Client.Signal, POST /v1/runs/{id}/signals/{name},
// or a plain NATS publish to jetrun.signal.<runId>.<name>. Do not wait for
// the same name from two goroutines at once: both would get the same signal.
func (r *Run) Wait(ctx context.Context, name string) (json.RawMessage, error) {
	e := r.e
	if err := events.ValidateSignalName(name); err != nil {
		return nil, fmt.Errorf("worker: wait: %w", err)
	}
	if r.fake != nil {
		return r.fake.Wait(ctx, name)
	}
	e.stateMu.Lock()
	e.waitingFor = name
	e.stateMu.Unlock()
	defer func() { // however the wait ends; the next row sync records it
		e.stateMu.Lock()
		if e.waitingFor == name {
			e.waitingFor, e.dirty = "", true
		}
		e.stateMu.Unlock()
	}()
	row, err := e.write(ctx, func(x *jetruntype.Run) error {
		if err := e.owned(x); err != nil {
			return err
		}
		x.WaitingFor = name
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("worker: wait for %s: %w", name, err)
	}
	e.stateMu.Lock()
	seen := max(row.SignalsSeen[name], e.signalsSeen[name])
	e.stateMu.Unlock()
	if err := e.publishSignalEvent(ctx, events.SignalEvent{Name: name, State: events.SignalWaiting}); err != nil {
		return nil, err
	}

	var (
		payload json.RawMessage
		seq     uint64
	)
	err = r.Park(ctx, func(ctx context.Context) (err error) {
		payload, seq, err = e.nextSignal(ctx, name, seen, row.CreatedAt)
		return err
	})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	e.stateMu.Lock()
	if e.signalsSeen == nil {
		e.signalsSeen = make(map[string]uint64)
	}
	e.signalsSeen[name] = seq
	e.stateMu.Unlock()
	e.noteSignal(now, nil) // received: a sign of progress; the next row sync records it
	if err := e.publishSignalEvent(ctx, events.SignalEvent{Name: name, State: events.SignalReceived, Payload: payload, Seq: seq}); err != nil {
		return nil, err
	}
	return payload, nil
}

// nextSignal returns the first signal named name stored after sequence
// seen, waiting for one. It reads the stream directly (the next message on
// the signal's subject); the worker's one signal consumer wakes it when a
// new signal is stored, so a waiting run costs no server consumer.
func (e *execution) nextSignal(ctx context.Context, name string, seen uint64, created time.Time) (json.RawMessage, uint64, error) {
	wake := e.w.waiters.add(e.id, name)
	defer e.w.waiters.remove(e.id, name, wake)
	for {
		payload, seq, err := e.storedSignal(ctx, name, seen, created)
		if err != nil || seq != 0 {
			return payload, seq, err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, 0, context.Cause(ctx)
		}
	}
}

// storedSignal reads the first signal named name stored after sequence
// seen; seq 0 when there is none yet. Without a seen sequence, signals
// stored well before the run was created (an earlier run of the same id)
// are skipped.
func (e *execution) storedSignal(ctx context.Context, name string, seen uint64, created time.Time) (json.RawMessage, uint64, error) {
	subject := e.w.ns.SignalSubject(e.id, name)
	from := created.Add(-time.Minute) // tolerate clock skew with the server
	for next := seen + 1; ; {
		msg, err := e.w.signalsStream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, 0, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, context.Cause(ctx)
			}
			return nil, 0, fmt.Errorf("worker: wait for signal %s: %w", name, err)
		}
		if seen == 0 && msg.Time.Before(from) {
			next = msg.Sequence + 1
			continue
		}
		payload := json.RawMessage(msg.Data)
		if len(payload) == 0 || !json.Valid(payload) {
			// A plain publish may carry text: hand it over as a JSON string.
			payload, _ = json.Marshal(string(msg.Data))
		}
		return payload, msg.Sequence, nil
	}
}

// publishSignalEvent puts a wait or a received signal on the run's timeline.
func (e *execution) publishSignalEvent(ctx context.Context, ev events.SignalEvent) error {
	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	e.signalEvents++
	ev.RunID, ev.Attempt, ev.At = e.id, e.attempt, time.Now()
	_, err := e.pub.publish(ctx, events.KindSignal,
		events.SignalEventMsgID(e.id, e.attempt, ev.Name, ev.State, e.signalEvents), ev, false)
	return err
}

// encodePayload encodes a handler's value for an event, within the size
// limit; what names it in errors ("chunk", "progress data" …).
func (e *execution) encodePayload(what string, v any) (json.RawMessage, error) {
	return encodePayload(e.id, what, v)
}

// encodePayload encodes a handler's value for an event of run id.
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
