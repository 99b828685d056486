// Package workertest unit-tests a worker.Handler without a NATS server: a
// Run hands the handler a *worker.Run that records its chunks, progress
// reports, milestones, steps and result, answers its signal waits and calls from
// the test, and lets the test cancel it.
//
//	run := workertest.NewRun(workertest.Config{AgentType: "research", Input: map[string]any{"topic": "tides"}})
//	res, err := run.Serve(ctx, handler)
//	// run.Chunks(), run.Progress(), run.Milestones() …
//
// The Run's methods check what the worker checks (JSON-encodable payloads
// within events.MaxChunkBytes, milestone, signal, call and step names) and fail
// with worker.ErrLeaseLost once the handler returned, as they do on a
// worker. Progress reports are recorded as made, not coalesced. Nested runs
// (Spawn, RunChild) fail with ErrUnsupported.
package workertest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
	"github.com/jetrun/jetrun/pkg/worker/internal/runhook"
)

// ErrUnsupported is the error of the Run methods a test run cannot stand in
// for: Spawn and RunChild (test those handlers against a real worker).
var ErrUnsupported = runhook.ErrUnsupported

// Default values of Config's zero fields.
const (
	DefaultRunID     = "run-1"
	DefaultAgentType = "test"
)

// Config describes the run a handler gets. The zero value is a first
// attempt of run DefaultRunID of agent type DefaultAgentType without input.
type Config struct {
	// ID is the run id; DefaultRunID when empty.
	ID string
	// AgentType is the run's agent type; DefaultAgentType when empty.
	AgentType string
	// Attempt is the attempt number; 1 when zero.
	Attempt int
	// Parent and Depth place the run under another one.
	Parent string
	Depth  int
	// Input is the run's input: JSON-encoded, a json.RawMessage or []byte
	// as is; nil for none.
	Input any
	// Milestones are the milestones earlier attempts reached (a takeover).
	Milestones []events.Milestone
	// Steps are the steps earlier attempts stored: worker.Run.Step returns
	// their output without running the step's function.
	Steps []events.Step
	// Call answers the handler's worker.Run.Call; nil answers every call
	// with an error.
	Call func(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error)
	// Logger is what worker.Run.Logger returns; nil discards.
	Logger *slog.Logger
}

// Progress is a recorded progress report.
type Progress struct {
	Fraction float64
	Phase    string
	Message  string
	Data     json.RawMessage
}

// Run is a recording run. Its methods are safe for concurrent use, by the
// test while the handler runs included.
type Run struct {
	cfg    Config
	handle *worker.Run
	log    *slog.Logger

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every change
	served     bool
	done       bool
	cancel     context.CancelCauseFunc
	cancelled  error // a Cancel before Serve
	chunks     []json.RawMessage
	progress   []Progress
	milestones []events.Milestone
	steps      []events.Step
	waiting    string
	signals    map[string][]json.RawMessage
	result     *worker.Result
	err        error
}

// NewRun returns a run described by cfg. It panics if cfg.Input is not
// JSON-encodable, a mistake in the test.
func NewRun(cfg Config) *Run {
	row := &model.Row{
		ID:        cmp.Or(cfg.ID, DefaultRunID),
		AgentType: cmp.Or(cfg.AgentType, DefaultAgentType),
		Attempt:   cmp.Or(cfg.Attempt, 1),
		Parent:    cfg.Parent,
		Depth:     cfg.Depth,
		Status:    events.StatusRunning,
		CreatedAt: time.Now(),
		StartedAt: time.Now(),
	}
	switch in := cfg.Input.(type) {
	case nil:
	case json.RawMessage:
		row.Input = in
	case []byte:
		row.Input = in
	default:
		raw, err := json.Marshal(in)
		if err != nil {
			panic(fmt.Sprintf("workertest: input is not JSON-encodable: %v", err))
		}
		row.Input = raw
	}
	if n := len(cfg.Milestones); n > 0 {
		row.Milestones = n
		row.LastMilestone = cfg.Milestones[n-1].Name
	}
	r := &Run{
		cfg:        cfg,
		log:        cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		changed:    make(chan struct{}),
		milestones: slices.Clone(cfg.Milestones),
		steps:      slices.Clone(cfg.Steps),
		signals:    make(map[string][]json.RawMessage),
	}
	r.handle = runhook.NewRun(row, backend{r}).(*worker.Run)
	return r
}

// Handle returns the *worker.Run to pass to a handler, for tests that call
// ServeRun themselves; Serve does it for you.
func (r *Run) Handle() *worker.Run { return r.handle }

// Serve calls h with the run, as a worker would, and records and returns
// its result. The handler's context is ctx's child, cancelled by Cancel. A
// panic in the handler is not recovered. A Run serves once.
func (r *Run) Serve(ctx context.Context, h worker.Handler) (worker.Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.mu.Lock()
	if r.served {
		r.mu.Unlock()
		panic("workertest: a Run serves once")
	}
	r.served = true
	r.cancel = cancel
	if r.cancelled != nil {
		cancel(r.cancelled)
	}
	r.mu.Unlock()

	res, err := h.ServeRun(ctx, r.handle)

	r.mu.Lock()
	r.done = true
	r.result, r.err = &res, err
	r.notifyLocked()
	r.mu.Unlock()
	return res, err
}

// Cancel cancels the handler's context with cause, worker.ErrCancelled
// when nil, as a cancel of the run (or worker.ErrShuttingDown, a shutdown)
// does. Before Serve, the handler starts cancelled.
func (r *Run) Cancel(cause error) {
	cause = cmp.Or(cause, worker.ErrCancelled)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel(cause)
		return
	}
	if r.cancelled == nil {
		r.cancelled = cause
	}
}

// Signal sends the run a signal, as parent.Client.Signal does: a handler's
// worker.Run.Wait for name returns payload (JSON-encoded; a
// json.RawMessage as is). Signals sent before the wait are kept.
func (r *Run) Signal(name string, payload any) error {
	if err := events.ValidateToken("signal name", name); err != nil {
		return fmt.Errorf("workertest: signal: %w", err)
	}
	raw, ok := payload.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(payload); err != nil {
			return fmt.Errorf("workertest: signal %s: %w", name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signals[name] = append(r.signals[name], raw)
	r.notifyLocked()
	return nil
}

// Chunks returns the chunks recorded so far, each as its JSON.
func (r *Run) Chunks() []json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.chunks)
}

// Progress returns the progress reports recorded so far, in order.
func (r *Run) Progress() []Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.progress)
}

// Milestones returns every milestone: Config.Milestones, then those the
// handler reached, numbered on from them.
func (r *Run) Milestones() []events.Milestone {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.milestones)
}

// Steps returns every stored step: Config.Steps, then those the handler
// stored.
func (r *Run) Steps() []events.Step {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.steps)
}

// Waiting returns the signal name the handler waits for, if any.
func (r *Run) Waiting() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting
}

// Returned reports whether the handler returned.
func (r *Run) Returned() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result != nil
}

// Result returns what the handler returned (the zero values before it
// returned: see Returned).
func (r *Run) Result() (worker.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result == nil {
		return worker.Result{}, nil
	}
	return *r.result, r.err
}

// WaitFor returns once cond (called with no lock held) is true, or ctx's
// error. cond is checked again after every change to the run: a chunk,
// progress, milestone, wait, signal or the handler's return. Use it to act
// while the handler runs, as in "cancel after the second chunk".
func (r *Run) WaitFor(ctx context.Context, cond func(*Run) bool) error {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if cond(r) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *Run) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// backend records what the handler does through its *worker.Run: it
// implements the worker's backend interface, as a worker's execution does.
type backend struct{ r *Run }

// record runs f under the lock unless the handler returned.
func (b backend) record(f func()) error {
	b.r.mu.Lock()
	defer b.r.mu.Unlock()
	if b.r.done {
		return worker.ErrLeaseLost
	}
	f()
	b.r.notifyLocked()
	return nil
}

func (b backend) Logger() *slog.Logger { return b.r.log }

func (b backend) Milestones() []events.Milestone { return b.r.Milestones() }

func (b backend) Chunk(ctx context.Context, data json.RawMessage) error {
	return b.record(func() { b.r.chunks = append(b.r.chunks, data) })
}

func (b backend) Progress(ctx context.Context, p events.Progress) error {
	return b.record(func() {
		b.r.progress = append(b.r.progress, Progress{Fraction: p.Fraction, Phase: p.Phase, Message: p.Message, Data: p.Data})
	})
}

func (b backend) Milestone(ctx context.Context, name string, data json.RawMessage) (events.Milestone, error) {
	var m events.Milestone
	err := b.record(func() {
		m = events.Milestone{RunID: b.r.handle.ID(), Name: name, Data: data, Sequence: 1,
			Attempt: b.r.handle.Attempt(), At: time.Now()}
		if n := len(b.r.milestones); n > 0 {
			m.Sequence = b.r.milestones[n-1].Sequence + 1
		}
		b.r.milestones = append(b.r.milestones, m)
	})
	return m, err
}

func (b backend) Flush(ctx context.Context) error {
	b.r.mu.Lock()
	defer b.r.mu.Unlock()
	if b.r.done {
		return worker.ErrLeaseLost
	}
	return nil
}

func (b backend) Park(ctx context.Context, wait func(ctx context.Context) error) error {
	return wait(ctx)
}

func (b backend) Wait(ctx context.Context, name string, _ *events.Ask) (json.RawMessage, error) {
	if err := b.record(func() { b.r.waiting = name }); err != nil {
		return nil, err
	}
	defer func() {
		b.r.mu.Lock()
		if b.r.waiting == name {
			b.r.waiting = ""
			b.r.notifyLocked()
		}
		b.r.mu.Unlock()
	}()
	for {
		b.r.mu.Lock()
		if q := b.r.signals[name]; len(q) > 0 {
			b.r.signals[name] = q[1:]
			b.r.mu.Unlock()
			return q[0], nil
		}
		ch := b.r.changed
		b.r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (b backend) Call(ctx context.Context, name string, input json.RawMessage, _ *events.Ask) (json.RawMessage, error) {
	if b.r.cfg.Call == nil {
		return nil, fmt.Errorf("workertest: call %s: no Config.Call to answer it", name)
	}
	return b.r.cfg.Call(ctx, name, input)
}

func (b backend) Spawn(ctx context.Context, req worker.ChildRequest) (*worker.Child, error) {
	return nil, fmt.Errorf("worker: run %s: start child: %w", b.r.handle.ID(), ErrUnsupported)
}

// Usage accepts a valid report (worker.Run.Usage checked it) and keeps
// nothing; one made with a step's context is stored with the step (Steps),
// as on a worker.
func (b backend) Usage(ctx context.Context, u worker.Usage) error { return nil }

// Reserve accepts a valid reservation (worker.Run.Reserve checked it) and
// holds nothing: a test run has no tree budget.
func (b backend) Reserve(ctx context.Context, req runhook.ReserveRequest) (func(), error) {
	return func() {}, nil
}

func (b backend) LoadSteps(ctx context.Context) ([]events.Step, error) {
	return slices.Clone(b.r.cfg.Steps), nil
}

func (b backend) StoreStep(ctx context.Context, st events.Step) error {
	return b.record(func() { b.r.steps = append(b.r.steps, st) })
}
