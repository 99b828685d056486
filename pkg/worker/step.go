package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Durable steps: Run.Step runs a piece of work once per run, across
// attempts. The first call stores the work's output on the run's step
// subject (jetrun.run.<id>.step, Nats-Msg-Id <runId>.step.<name>), fenced
// like every event of the attempt and acknowledged before Step returns;
// a later attempt (a takeover, a retry, a resumed interrupted run) reads
// the run's stored steps once, at its first Step call, and returns the
// stored output instead of running the work again. A first attempt has no
// stored steps to read: its path has no extra round trip.
//
// At most twice: work that was running when its worker died, or whose
// store was refused because the run was taken over meanwhile, is not
// stored, and the next attempt runs it again. A step interrupted by one
// crash thus runs twice at most; each further crash inside the same step
// adds one run.

// A step function that returns an error marked jetruntype.Cancel fails
// for good: a request the model provider refused as invalid, say. Step
// stores the failure and returns it, as a *StepError, on every later call
// and attempt instead of running the function again. Any other error
// (jetruntype.RetryAfter's too) is not stored: the next call (or attempt)
// runs the function again.

// StepError is the stored failure of a step, as Step returns it: the first
// time (wrapping the function's error) and on every later call (with its
// text only). It always wraps a *jetruntype.CancelError, so a handler that
// returns it ends its run without a retry: another attempt would meet the
// same stored failure.
type StepError struct {
	Name    string // the step
	Message string // the function's error text
	err     error
}

func (e *StepError) Error() string { return "step " + e.Name + " failed: " + e.Message }
func (e *StepError) Unwrap() error { return e.err }

// stepUsage adds up the usage reported with one step's context (Run.Usage
// finds it there): the step's own spending, stored with it.
type stepUsage struct {
	mu sync.Mutex
	u  events.Usage
	n  int
}

type stepUsageKey struct{}

func (s *stepUsage) add(u Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	model.AddReport(&s.u, u)
	s.n++
}

// total is the step's usage, nil when it reported none.
func (s *stepUsage) total() *events.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return nil
	}
	u := s.u
	return &u
}

// steps is a run's book of stored steps, read once per attempt.
type steps struct {
	mu     sync.Mutex
	loaded bool
	byName map[string]events.Step
	order  []string
}

// Step runs fn once for the run under name and returns its output as
// JSON: the first call runs fn, stores what it returned (JSON-encoded; a
// json.RawMessage as is; at most events.MaxOutputBytes, ErrTooLarge
// beyond) and returns once it is stored; every later call with the same
// name, in this attempt or any later one, returns the stored output
// without calling fn. An error from fn is returned and not stored, so the
// next call runs fn again, unless it is marked jetruntype.Cancel: then it
// is stored and returned (as a *StepError) again. What Run.Usage reports
// with fn's context is the step's usage, stored with it (and counted in
// the run's totals as any report).
//
// Names are unique per run (see events.ValidateStepName): a loop names its
// steps "plan-1", "plan-2"… Work interrupted by a crash runs again: a
// step interrupted once runs at most twice. Do not run the same name from two goroutines at
// once: both would run fn, and the first stored output wins.
func (r *Run) Step(ctx context.Context, name string, fn func(ctx context.Context) (any, error)) (json.RawMessage, error) {
	if err := events.ValidateStepName(name); err != nil {
		return nil, fmt.Errorf("worker: step: %w", err)
	}
	if st, ok, err := r.storedStep(ctx, name); err != nil {
		return nil, err
	} else if ok {
		return stepResult(st, nil)
	}
	start := time.Now()
	spent := &stepUsage{}
	v, ferr := fn(context.WithValue(ctx, stepUsageKey{}, spent))
	st := events.Step{
		RunID: r.row.ID, Name: name, Attempt: r.row.Attempt, At: time.Now(),
		DurationMs: time.Since(start).Milliseconds(), Usage: spent.total(),
	}
	switch {
	case ferr == nil:
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("worker: output of step %s of run %s is not JSON-encodable: %w", name, r.row.ID, err)
		}
		if len(raw) > events.MaxOutputBytes {
			return nil, fmt.Errorf("worker: output of step %s of run %s is %d bytes; the limit is %d: %w",
				name, r.row.ID, len(raw), events.MaxOutputBytes, ErrTooLarge)
		}
		st.Output = raw
	case isCancel(ferr):
		st.Error = ferr.Error()
		if len(st.Error) > events.MaxOutputBytes {
			st.Error = st.Error[:events.MaxOutputBytes]
		}
	default:
		return nil, ferr
	}
	st, err := r.storeStep(ctx, st)
	if err != nil {
		return nil, err
	}
	return stepResult(st, ferr)
}

// Step is Run.Step with a typed output: fn's value is stored as JSON and
// decoded into a T, the first time as on every later call, so a handler
// sees the same value whether the work ran now or in an earlier attempt.
func Step[T any](ctx context.Context, run *Run, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var out T
	raw, err := run.Step(ctx, name, func(ctx context.Context) (any, error) {
		v, err := fn(ctx)
		return v, err
	})
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("worker: step %s: decode its stored output as %T: %w", name, out, err)
	}
	return out, nil
}

// Steps returns the steps the run stored so far, earlier attempts'
// included, in the order they were stored.
func (r *Run) Steps(ctx context.Context) ([]events.Step, error) {
	b := &r.steps
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := r.loadStepsLocked(ctx); err != nil {
		return nil, err
	}
	out := make([]events.Step, 0, len(b.order))
	for _, name := range b.order {
		out = append(out, b.byName[name])
	}
	return out, nil
}

func stepResult(st events.Step, ferr error) (json.RawMessage, error) {
	if st.Error != "" {
		if !isCancel(ferr) { // a stored failure, or another call's
			ferr = jetruntype.Cancel(errors.New(st.Error))
		}
		return nil, &StepError{Name: st.Name, Message: st.Error, err: ferr}
	}
	return st.Output, nil
}

// storedStep returns the stored step named name, reading the run's steps
// first if this attempt has not yet.
func (r *Run) storedStep(ctx context.Context, name string) (events.Step, bool, error) {
	b := &r.steps
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := r.loadStepsLocked(ctx); err != nil {
		return events.Step{}, false, err
	}
	st, ok := b.byName[name]
	return st, ok, nil
}

func (r *Run) loadStepsLocked(ctx context.Context) error {
	b := &r.steps
	if b.loaded {
		return nil
	}
	stored, err := r.b.LoadSteps(ctx)
	if err != nil {
		return err
	}
	b.byName = make(map[string]events.Step, len(stored))
	for _, st := range stored {
		b.addLocked(st)
	}
	b.loaded = true
	return nil
}

// addLocked keeps st unless a step of its name is kept already: the
// first stored wins.
func (b *steps) addLocked(st events.Step) events.Step {
	if have, ok := b.byName[st.Name]; ok {
		return have
	}
	b.byName[st.Name] = st
	b.order = append(b.order, st.Name)
	return st
}

// storeStep stores st and returns the step kept under its name.
func (r *Run) storeStep(ctx context.Context, st events.Step) (events.Step, error) {
	if err := r.b.StoreStep(ctx, st); err != nil {
		return events.Step{}, err
	}
	b := &r.steps
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addLocked(st), nil
}

// StoreStep publishes st and returns once it, and every event before it,
// is stored.
func (e *execution) StoreStep(ctx context.Context, st events.Step) error {
	if _, err := e.pub.publish(ctx, events.KindStep, wire.StepMsgID(e.id, st.Name), st, true); err != nil {
		return err
	}
	e.noteSignal(st.At, nil)
	return nil
}

// LoadSteps reads the steps earlier attempts stored, one direct get at a
// time like the milestones (no consumer per run taken over). A first
// attempt has none: it reads nothing.
func (e *execution) LoadSteps(ctx context.Context) ([]events.Step, error) {
	if !e.resumed {
		return nil, nil
	}
	e.curMu.Lock()
	from := max(e.cur.FirstEventSeq, 1)
	e.curMu.Unlock()
	subject := e.w.ns.RunSubject(e.id, events.KindStep)
	var out []events.Step
	for seq := from; ; {
		m, err := e.w.rt.EventsStreamFor(e.id).GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("worker: read the steps of run %s: %w", e.id, err)
		}
		seq = m.Sequence + 1
		var st events.Step
		if err := json.Unmarshal(m.Data, &st); err != nil || st.Name == "" {
			e.log.WarnContext(ctx, "skip a malformed step event", "seq", m.Sequence, "err", err)
			continue
		}
		out = append(out, st)
	}
}
