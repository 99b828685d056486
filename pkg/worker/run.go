package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

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
	// steps holds the run's stored steps (step.go).
	steps steps
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
// Flush; everything is stored before the run ends. Chunks emitted within
// the worker's ChunkWindow are stored as one event carrying their range;
// readers still see them one by one (wire.Replay).
func (r *Run) Chunk(ctx context.Context, data any) error {
	if r.fake != nil {
		raw, err := encodePayload(r.row.ID, "chunk", data)
		if err != nil {
			return err
		}
		return r.fake.Chunk(ctx, raw)
	}
	raw, err := r.e.encodePayload("chunk", data)
	if err != nil {
		return err
	}
	return r.e.emitChunk(ctx, raw)
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
	return e.emitProgress(ctx, ev)
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
	return e.emitMilestone(ctx, m)
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
