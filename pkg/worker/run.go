package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
)

// MaxMilestoneNameLength bounds milestone names.
const MaxMilestoneNameLength = 256

// Run is a handler's view of the run it executes. Its methods are safe for
// concurrent use. After the handler returns they fail with ErrLeaseLost.
type Run struct {
	e   *execution
	row *kv.Run
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
func (r *Run) Row() *kv.Run { return r.row.Clone() }

// Logger returns a logger carrying the run id, agent type and attempt.
func (r *Run) Logger() *slog.Logger { return r.e.log }

// Milestones returns the milestones already reached, by earlier attempts
// included, so a handler that took a run over can skip finished work.
func (r *Run) Milestones() []events.Milestone { return r.e.milestonesCopy() }

// Chunk appends data (any JSON-encodable value; a string stays a string) to
// the run's streamed output. Chunks get sequence numbers 1, 2, 3… in the
// order of the calls.
func (r *Run) Chunk(ctx context.Context, data any) error {
	e := r.e
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("worker: chunk of run %s is not JSON-encodable: %w", e.id, err)
	}
	if len(raw) > events.MaxChunkBytes {
		return fmt.Errorf("worker: chunk of run %s is %d bytes; the limit is %d: %w",
			e.id, len(raw), events.MaxChunkBytes, ErrTooLarge)
	}
	e.emitMu.Lock()
	seq := e.chunkSeq + 1
	_, err = e.pub.publish(ctx, events.KindChunk, events.ChunkMsgID(e.id, seq),
		events.Chunk{RunID: e.id, Seq: seq, Data: raw, Attempt: e.attempt})
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
	e := r.e
	ev := events.Progress{
		RunID:    e.id,
		Fraction: min(max(p.Fraction, 0), 1),
		Phase:    p.Phase,
		Message:  p.Message,
		Attempt:  e.attempt,
	}
	if p.Data != nil {
		raw, err := json.Marshal(p.Data)
		if err != nil {
			return fmt.Errorf("worker: progress data of run %s is not JSON-encodable: %w", e.id, err)
		}
		if len(raw) > events.MaxChunkBytes {
			return fmt.Errorf("worker: progress data of run %s is %d bytes; the limit is %d: %w",
				e.id, len(raw), events.MaxChunkBytes, ErrTooLarge)
		}
		ev.Data = raw
	}
	now := time.Now()
	e.noteSignal(now, &kv.ProgressSnapshot{Fraction: ev.Fraction, Phase: ev.Phase, Message: ev.Message, At: now})

	e.emitMu.Lock()
	defer e.emitMu.Unlock()
	if ev.Fraction >= 1 || now.Sub(e.lastProgressAt) >= e.w.cfg.ProgressInterval {
		e.pending = nil
		return e.publishProgressLocked(ctx, ev)
	}
	first := e.pending == nil
	e.pending = &ev
	if first {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// Milestone records that the run reached a named point. Milestones are
// durable (never coalesced), numbered 1, 2, 3… per run across attempts, and
// deduplicated by Nats-Msg-Id <runId>.m.<sequence>.
func (r *Run) Milestone(ctx context.Context, name string, data any) (events.Milestone, error) {
	e := r.e
	if name == "" || len(name) > MaxMilestoneNameLength {
		return events.Milestone{}, fmt.Errorf("worker: milestone name must be 1 to %d bytes, got %d",
			MaxMilestoneNameLength, len(name))
	}
	m := events.Milestone{RunID: e.id, Name: name, Attempt: e.attempt}
	if data != nil {
		raw, err := json.Marshal(data)
		if err != nil {
			return events.Milestone{}, fmt.Errorf("worker: milestone data of run %s is not JSON-encodable: %w", e.id, err)
		}
		if len(raw) > events.MaxChunkBytes {
			return events.Milestone{}, fmt.Errorf("worker: milestone data of run %s is %d bytes; the limit is %d: %w",
				e.id, len(raw), events.MaxChunkBytes, ErrTooLarge)
		}
		m.Data = raw
	}
	e.emitMu.Lock()
	m.Sequence = len(e.milestones) + 1
	if n := len(e.milestones); n > 0 {
		m.Sequence = e.milestones[n-1].Sequence + 1
	}
	m.At = time.Now()
	_, err := e.pub.publish(ctx, events.KindMilestone, events.MilestoneMsgID(e.id, m.Sequence), m)
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
