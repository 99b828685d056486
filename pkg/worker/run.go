package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"log/slog"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
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
	b   backend
	row *model.Row
	// steps holds the run's stored steps (step.go).
	steps steps
	// vars counts the variables it sets (subagent.go).
	vars variables
}

// backend carries out what a handler asks of its Run once the Run has
// checked and encoded it (names, JSON, sizes: what the worker checks), so
// a backend sees what would go on the wire. On a worker it is the
// attempt's execution; in package workertest, a recorder, built through
// runhook.NewRun.
type backend interface {
	Logger() *slog.Logger
	// Milestones returns the milestones reached, earlier attempts' included.
	Milestones() []events.Milestone
	Chunk(ctx context.Context, data json.RawMessage) error
	// Progress gets Fraction clamped to 0..1 and Data encoded; the backend
	// fills in the run id and attempt.
	Progress(ctx context.Context, p events.Progress) error
	// Milestone numbers and records a milestone whose name is valid.
	Milestone(ctx context.Context, name string, data json.RawMessage) (events.Milestone, error)
	Flush(ctx context.Context) error
	Park(ctx context.Context, wait func(ctx context.Context) error) error
	// Wait is called with a valid signal name and the wait's ask.
	Wait(ctx context.Context, name string, ask *events.Ask) (json.RawMessage, error)
	// Call is called with a valid call name, and its ask if it is one.
	Call(ctx context.Context, name string, input json.RawMessage, ask *events.Ask) (json.RawMessage, error)
	Spawn(ctx context.Context, req ChildRequest) (*Child, error)
	// Usage is called with a valid report that is not empty, added to
	// its step's usage already when it is made with a step's context.
	Usage(ctx context.Context, u Usage) error
	// Reserve holds a checked amount (Run.Reserve) and returns what gives
	// it back (called at most once).
	Reserve(ctx context.Context, req runhook.ReserveRequest) (release func(), err error)
	// LoadSteps returns the steps earlier attempts stored.
	LoadSteps(ctx context.Context) ([]events.Step, error)
	// StoreStep stores a step the handler completed (or failed
	// permanently) and returns once it, and every event before it, is
	// stored.
	StoreStep(ctx context.Context, st events.Step) error
}

func init() {
	runhook.NewRun = func(row *model.Row, b any) any { return &Run{row: row, b: b.(backend)} }
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
func (r *Run) Row() *jetruntype.Run { return r.row.View() }

// Logger returns a logger carrying the run id, agent type and attempt.
func (r *Run) Logger() *slog.Logger { return r.b.Logger() }

// Milestones returns the milestones already reached, by earlier attempts
// included, so a handler that took a run over can skip finished work.
func (r *Run) Milestones() []events.Milestone { return r.b.Milestones() }

// Chunk appends data (any JSON-encodable value; a string stays a string) to
// the run's streamed output. Chunks get sequence numbers 1, 2, 3… in the
// order of the calls. Chunk returns once the chunk is on its way: chunks are
// pipelined (a bounded window is in flight), so a chunk that cannot be
// stored (the run was taken over: ErrLeaseLost) fails a later call, or
// Flush; everything is stored before the run ends. A chunk of a quiet run
// leaves at once; those of a streaming run wait at most the worker's
// ChunkWindow and are stored as one event carrying their range; readers
// still see them one by one (a replay yields each as an [events.Event] of
// its own: see [events.Event.Part]).
func (r *Run) Chunk(ctx context.Context, data any) error {
	raw, err := encodePayload(r.row.ID, "chunk", data)
	if err != nil {
		return err
	}
	return r.b.Chunk(ctx, raw)
}

// Progress reports progress. Reports are coalesced: at most one progress
// event per ProgressInterval goes out, and the latest one is flushed when the
// window ends; a report with Fraction ≥ 1 goes out at once. The row keeps the
// latest snapshot (without Data).
func (r *Run) Progress(ctx context.Context, p Progress) error {
	ev := events.Progress{Fraction: min(max(p.Fraction, 0), 1), Phase: p.Phase, Message: p.Message}
	if p.Data != nil {
		raw, err := encodePayload(r.row.ID, "progress data", p.Data)
		if err != nil {
			return err
		}
		ev.Data = raw
	}
	return r.b.Progress(ctx, ev)
}

// Milestone records that the run reached a named point. Milestones are
// durable (never coalesced; Milestone returns once it, and every event
// before it, is stored), numbered 1, 2, 3… per run across attempts, and
// deduplicated by Nats-Msg-Id <runId>.m.<sequence>.
func (r *Run) Milestone(ctx context.Context, name string, data any) (events.Milestone, error) {
	if name == "" || len(name) > MaxMilestoneNameLength {
		return events.Milestone{}, fmt.Errorf("worker: milestone name must be 1 to %d bytes, got %d",
			MaxMilestoneNameLength, len(name))
	}
	var raw json.RawMessage
	if data != nil {
		var err error
		if raw, err = encodePayload(r.row.ID, "milestone data", data); err != nil {
			return events.Milestone{}, err
		}
	}
	return r.b.Milestone(ctx, name, raw)
}

// Flush returns once every event the handler published so far is stored,
// or the error that stopped one (ErrLeaseLost: the run was taken over).
func (r *Run) Flush(ctx context.Context) error { return r.b.Flush(ctx) }

// Park runs wait, something that only waits on what happens outside this
// process (a person, another run: awaiting a nested run of the same agent
// type, say), with the run's concurrency slot given back meanwhile: the
// worker takes other runs while this one is parked, and the run takes a
// slot again when wait returns (it waits for one, or for ctx). The run keeps
// its worker and its place; only the slot is lent out. Wait parks by
// itself.
func (r *Run) Park(ctx context.Context, wait func(ctx context.Context) error) error {
	return r.b.Park(ctx, wait)
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
//
// The wait is an ask (asks inbox: GET /v1/asks, `jetrun asks`), with its
// id <runId>.s.<name>.<n>, the same when a takeover waits again: ask, if
// given (at most one), says what is asked; without it the ask is a form
// taking any JSON value. Answering the ask sends the signal; a signal sent
// directly answers the ask.
func (r *Run) Wait(ctx context.Context, name string, ask ...Ask) (json.RawMessage, error) {
	if err := events.ValidateToken("signal name", name); err != nil {
		return nil, fmt.Errorf("worker: wait: %w", err)
	}
	var a Ask
	if len(ask) > 0 {
		a = ask[0]
	}
	fallback, _ := json.Marshal(map[string]string{"signal": name})
	spec, err := a.spec(r.row.ID, fallback)
	if err != nil {
		return nil, err
	}
	return r.b.Wait(ctx, name, spec)
}

// The execution as its Run's backend: what a handler's calls do on a
// worker.

func (e *execution) Logger() *slog.Logger { return e.log }

func (e *execution) Milestones() []events.Milestone { return e.emit.milestonesCopy() }

func (e *execution) Chunk(ctx context.Context, data json.RawMessage) error {
	if err := e.claimLate(ctx); err != nil {
		return err
	}
	return e.emitChunk(ctx, data)
}

func (e *execution) Progress(ctx context.Context, p events.Progress) error {
	if err := e.claimLate(ctx); err != nil {
		return err
	}
	p.RunID, p.Attempt = e.id, e.attempt
	return e.emitProgress(ctx, p)
}

func (e *execution) Milestone(ctx context.Context, name string, data json.RawMessage) (events.Milestone, error) {
	if err := e.claimLate(ctx); err != nil {
		return events.Milestone{}, err
	}
	return e.emitMilestone(ctx, events.Milestone{RunID: e.id, Name: name, Data: data, Attempt: e.attempt})
}

func (e *execution) Flush(ctx context.Context) error {
	if e.unclaimed() {
		return nil // nothing published yet
	}
	if err := e.emit.flush(ctx); err != nil {
		return err
	}
	return e.pub.flush(ctx)
}

func (e *execution) Park(ctx context.Context, wait func(ctx context.Context) error) error {
	if err := e.claimLate(ctx); err != nil {
		return err
	}
	e.parking.park()
	err := wait(ctx)
	if uerr := e.parking.unpark(ctx); uerr != nil && err == nil {
		err = uerr
	}
	return err
}

func (e *execution) Wait(ctx context.Context, name string, ask *events.Ask) (_ json.RawMessage, err error) {
	if err := e.claimLate(ctx); err != nil {
		return nil, err
	}
	defer e.rw.waitSignal(name)() // however the wait ends; the next row sync records it
	now := time.Now()
	row, err := e.write(ctx, func(x *model.Row) error {
		return e.apply(x, now, model.Waiting{By: e.holder(), Name: name})
	})
	if err != nil {
		return nil, fmt.Errorf("worker: wait for %s: %w", name, err)
	}
	seen := e.rw.seenSignal(row, name)
	ask.ID, ask.Via, ask.Name, ask.After = asks.SignalID(e.id, name, seen), events.AskViaSignal, name, seen
	askID := e.openAsk(ctx, ask)
	var payload json.RawMessage
	defer func() {
		werr := err
		if payload != nil {
			werr = nil // the signal is stored: the ask has its answer
		}
		e.settleAsk(ctx, askID, payload, "signal", werr)
	}()
	if err := e.emit.signal(ctx, events.SignalEvent{Name: name, State: events.SignalWaiting}); err != nil {
		return nil, err
	}

	var seq uint64
	err = e.Park(ctx, func(ctx context.Context) (err error) {
		payload, seq, err = e.nextSignal(ctx, name, seen, row.CreatedAt)
		return err
	})
	if err != nil {
		return nil, err
	}
	e.rw.sawSignal(name, seq, time.Now()) // received: a sign of progress; the next row sync records it
	if err := e.emit.signal(ctx, events.SignalEvent{Name: name, State: events.SignalReceived, Payload: payload, Seq: seq}); err != nil {
		return nil, err
	}
	return payload, nil
}
