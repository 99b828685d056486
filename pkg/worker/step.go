package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Durable steps: Run.Step runs a piece of work once per run, across
// attempts. The first call stores the work's output on the run's step
// subject (jetrun.run.<id>.step, Nats-Msg-Id <runId>.step.<name>), fenced
// like every event of the attempt and acknowledged before Step returns;
// a later attempt (a takeover, a retry, a resumed interrupted run) reads
// the run's stored steps once, as it starts (with its milestones), and
// returns the stored output instead of running the work again. A first
// attempt has no stored steps to read: its path has no extra round trip.
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

// Error says which step failed, and its stored message.
func (e *StepError) Error() string { return "step " + e.Name + " failed: " + e.Message }

// Unwrap returns the *jetruntype.CancelError the failure is: it wraps the
// error of the step's function on the call that ran it, and the stored
// text on later calls.
func (e *StepError) Unwrap() error { return e.err }

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
	if c, ok := r.b.(claimer); ok {
		if err := c.claimLate(ctx); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	spent := &stepUsage{}
	v, ferr := fn(context.WithValue(ctx, stepUsageKey{}, spent))
	spent.releaseReservations() // the step ended: what no report settled goes back
	st := events.Step{
		RunID: r.row.ID, Name: name, Attempt: r.row.Attempt, At: time.Now(),
		DurationMs: time.Since(start).Milliseconds(), Usage: spent.total(),
	}
	switch {
	case ferr == nil:
		raw, err := json.Marshal(v)
		if err != nil {
			r.freeStep(spent)
			return nil, fmt.Errorf("worker: output of step %s of run %s is not JSON-encodable: %w", name, r.row.ID, err)
		}
		if len(raw) > events.MaxOutputBytes {
			r.freeStep(spent)
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
		r.freeStep(spent)
		return nil, ferr
	}
	st, err := r.storeStep(ctx, st, spent)
	if err != nil {
		return nil, err
	}
	return stepResult(st, ferr)
}

// claimer is a backend whose attempt may not hold its run yet (the claim
// window, Config.ClaimWindow). A step's work runs only once it does: an
// unclaimed attempt may not own its run (a duplicate dispatch, or a row
// read from a replica that was behind, starts one beside the attempt that
// holds or ended the run), and storing the step claims anyway, so claiming
// before the work costs no write more.
type claimer interface {
	claimLate(ctx context.Context) error
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

// storeStep stores st, whose usage spent holds, and returns the step kept
// under its name.
func (r *Run) storeStep(ctx context.Context, st events.Step, spent *stepUsage) (events.Step, error) {
	var err error
	if sb, ok := r.b.(stepBook); ok {
		err = sb.storeStepWith(ctx, st, spent)
	} else {
		err = r.b.StoreStep(ctx, st)
	}
	if err != nil {
		return events.Step{}, err
	}
	b := &r.steps
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addLocked(st), nil
}

// freeStep makes the usage of a step that is not stored the attempt's,
// on a backend that counts it (stepBook).
func (r *Run) freeStep(spent *stepUsage) {
	if sb, ok := r.b.(stepBook); ok {
		sb.freeStep(spent)
	}
}

// StoreStep publishes st and returns once it, and every event before it,
// is stored.
func (e *execution) StoreStep(ctx context.Context, st events.Step) error {
	return e.storeStepWith(ctx, st, nil)
}

// LoadSteps returns the steps earlier attempts stored, read as the attempt
// started (readSteps).
func (e *execution) LoadSteps(ctx context.Context) ([]events.Step, error) {
	return e.storedSteps, nil
}

// readSteps reads the steps earlier attempts stored, one direct get at a
// time like the milestones (no consumer per run taken over), from the
// run's first event (from). Only an attempt that may follow others reads
// them (start), as it starts: it counts the usage of those the row does
// not count yet (startSteps), and its handler's Run.Step finds them.
func (e *execution) readSteps(ctx context.Context, from uint64) ([]events.Step, error) {
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
