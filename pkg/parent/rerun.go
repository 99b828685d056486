package parent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Errors returned by [Client.Rerun]; test with errors.Is.
var (
	// ErrRunLive is returned by Rerun for a run that may still be
	// executing (starting, running, or interrupted with its child still
	// running): re-run it once it ended.
	ErrRunLive = errors.New("run is still live")
	// ErrStepNotStored is returned by Rerun, in a *StepNotStoredError, for
	// a step the run never stored.
	ErrStepNotStored = errors.New("step not stored")
	// ErrRunIDTaken is returned by Rerun for a RerunRequest.RunID that
	// names a run which is not a re-run of the same run from the same step.
	ErrRunIDTaken = errors.New("run id is taken by another run")
)

// StepNotStoredError is the error of a re-run from, or with an override
// of, a step the run never stored: it lists the steps it has.
type StepNotStoredError struct {
	RunID string
	Step  string
	// Stored are the steps the run stored, in their order.
	Stored []string
}

// Error names the step and lists the run's steps.
func (e *StepNotStoredError) Error() string {
	have := "none"
	if len(e.Stored) > 0 {
		have = strings.Join(e.Stored, ", ")
	}
	return fmt.Sprintf("run %s has no stored step %q; its steps: %s", e.RunID, e.Step, have)
}

// Unwrap returns ErrStepNotStored.
func (e *StepNotStoredError) Unwrap() error { return ErrStepNotStored }

// RerunRequest says how [Client.Rerun] re-runs a run.
type RerunRequest struct {
	// FromStep is the first step the re-run executes: every step the run
	// stored before it (in its stored order) is given back stored. Empty:
	// a retry, given back every step the run stored with an output (a
	// step that failed runs again).
	FromStep string
	// Input, when not nil, replaces the run's input (as Request.Input).
	Input any
	// Steps overrides the outputs of given steps, by name (each JSON-
	// encoded; a json.RawMessage as is).
	Steps map[string]any
	// RunID is the re-run's id (default: a new one). A re-run of the same
	// run from the same step under an id that has one returns it.
	RunID string
	// Budget, when not nil, bounds the re-run's tree instead of the
	// run's own budget.
	Budget *events.TreeBudget
}

// Rerun starts a new run of run id's agent type whose steps before
// req.FromStep are given back stored, as the run stored them (or as
// req.Steps overrides them): its handler finds them stored and does not
// execute them, and their usage is not charged again. Its row says so:
// ForkedFrom names the run, the step, and the steps given. The new run is
// top level and not detached, with the run's input unless req.Input
// replaces it; run id itself is never changed. A re-run of a re-run works
// the same way.
//
// It returns ErrRunNotFound for an unknown run, ErrRunLive for one still
// live, a *StepNotStoredError (ErrStepNotStored) for a step the run never
// stored, ErrBadRequest for a bad request, and what Dispatch returns.
func (c *Client) Rerun(ctx context.Context, id string, req RerunRequest) (*Dispatched, error) {
	orig, err := c.stored(ctx, id)
	if errors.Is(err, ErrRunNotFound) {
		return nil, fmt.Errorf("parent: re-run run %s: %w", id, ErrRunNotFound)
	}
	if err != nil {
		return nil, err
	}
	if orig.Live() {
		return nil, fmt.Errorf("parent: re-run run %s: %w (%s)", id, ErrRunLive, orig.Status)
	}
	stored, err := c.Steps(ctx, id)
	if err != nil {
		return nil, err
	}
	given, fork, err := req.given(id, stored)
	if err != nil {
		return nil, err
	}
	d, err := req.dispatch(orig)
	if err != nil {
		return nil, err
	}
	if err := c.checkAgentType(ctx, orig.AgentType); err != nil {
		return nil, err
	}
	if err := c.checkInput(ctx, orig.AgentType, d.Input); err != nil {
		return nil, err
	}
	if existing, _, err := c.lookup(ctx, d.RunID); err == nil {
		return c.existingRerun(ctx, existing, fork, given)
	}
	// The row first, so that its id is the re-run's before anything is
	// stored under it; it starts its events where the given steps go.
	row := model.NewRun(orig.AgentType, d, 0, time.Now())
	row.ForkedFrom = fork
	if len(given) > 0 {
		if row.FirstEventSeq, err = c.rt.NextEventSeq(ctx, d.RunID); err != nil {
			return nil, fmt.Errorf("parent: re-run run %s as %s: %w", id, d.RunID, err)
		}
	}
	err = jsfault.RetryRepair(ctx, c.cfg.DispatchRetry, c.rt.Repair, func(ctx context.Context) error {
		_, err := c.store.Create(ctx, row)
		return err
	})
	if errors.Is(err, runstore.ErrRunExists) {
		existing, _, err := c.get(ctx, d.RunID)
		if err != nil {
			return nil, fmt.Errorf("parent: re-run run %s as %s: %w", id, d.RunID, err)
		}
		return c.existingRerun(ctx, existing, fork, given)
	}
	if err != nil {
		return nil, fmt.Errorf("parent: re-run run %s as %s: %w", id, d.RunID, err)
	}
	if _, err := c.rt.GiveSteps(ctx, d.RunID, id, given); err != nil {
		if ctx.Err() == nil {
			c.failDispatch(ctx, row.ID, err) // never dispatched without its steps
		}
		return nil, fmt.Errorf("parent: re-run run %s as %s: %w: %w", id, d.RunID, ErrDispatchFailed, err)
	}
	if _, err := c.publishDispatch(ctx, row.AgentType, d, d.RunID); err != nil {
		if ctx.Err() == nil {
			c.failDispatch(ctx, row.ID, err)
		}
		return nil, fmt.Errorf("parent: re-run run %s as %s: %w: %w", id, d.RunID, ErrDispatchFailed, err)
	}
	return &Dispatched{Run: row.View(), Created: true}, nil
}

// existingRerun answers a re-run whose id has a run: the same re-run (as
// Dispatch re-attaches), or ErrRunIDTaken. A re-run left starting without
// a dispatch (its caller died) is given its steps again (the dedup window
// keeps one copy; a reader keeps the first of a name) before its dispatch.
func (c *Client) existingRerun(ctx context.Context, row *model.Row, fork *jetruntype.Fork, given []events.Step) (*Dispatched, error) {
	f := row.ForkedFrom
	if f == nil || f.RunID != fork.RunID || f.Step != fork.Step {
		return nil, fmt.Errorf("parent: re-run run %s as %s: %w", fork.RunID, row.ID, ErrRunIDTaken)
	}
	if row.Status == events.StatusStarting && row.DispatchSeq == 0 && row.Attempt == 0 {
		if _, err := c.rt.GiveSteps(ctx, row.ID, fork.RunID, given); err != nil {
			return nil, fmt.Errorf("parent: re-run run %s as %s: %w: %w", fork.RunID, row.ID, ErrDispatchFailed, err)
		}
	}
	row, err := c.existing(ctx, row, Request{AgentType: row.AgentType})
	if err != nil {
		return nil, err
	}
	return &Dispatched{Run: row.View(), Created: false}, nil
}

// given returns the steps a re-run of run id, which stored stored, is
// given back (overrides applied), and its row's ForkedFrom.
func (req RerunRequest) given(id string, stored []events.Step) ([]events.Step, *jetruntype.Fork, error) {
	names := make([]string, len(stored))
	for i, st := range stored {
		names[i] = st.Name
	}
	var given []events.Step
	switch i := slices.Index(names, req.FromStep); {
	case req.FromStep == "":
		for _, st := range stored {
			if st.Error == "" {
				given = append(given, st)
			}
		}
	case i < 0:
		return nil, nil, fmt.Errorf("parent: re-run: %w", &StepNotStoredError{RunID: id, Step: req.FromStep, Stored: names})
	default:
		given = slices.Clone(stored[:i])
	}
	fork := &jetruntype.Fork{RunID: id, Step: req.FromStep, GivenCount: len(given)}
	givenNames := make([]string, len(given))
	for i, st := range given {
		givenNames[i] = st.Name
	}
	fork.Given = slices.Clone(givenNames[:min(len(givenNames), jetruntype.MaxForkGiven)])
	for _, name := range sortedKeys(req.Steps) {
		i := slices.Index(givenNames, name)
		if i < 0 {
			return nil, nil, fmt.Errorf("parent: re-run: an override names a step given back (one before fromStep): %w",
				&StepNotStoredError{RunID: id, Step: name, Stored: givenNames})
		}
		out, err := encodeOutput(req.Steps[name])
		if err != nil {
			return nil, nil, fmt.Errorf("parent: re-run: %w: step %s: %w", ErrBadRequest, name, err)
		}
		given[i].Output, given[i].Error = out, ""
		fork.Overridden = append(fork.Overridden, name)
	}
	return given, fork, nil
}

// dispatch is the re-run's dispatch: orig's agent type, input and budget
// unless req replaces them, top level and not detached.
func (req RerunRequest) dispatch(orig *model.Row) (events.Dispatch, error) {
	d := events.Dispatch{RunID: req.RunID, Input: orig.Input, Budget: orig.Budget}
	if req.Budget != nil {
		d.Budget = req.Budget
	}
	if req.Input != nil {
		in, err := encodeOutput(req.Input)
		if err != nil {
			return d, fmt.Errorf("parent: re-run: %w: input: %w", ErrBadRequest, err)
		}
		d.Input = in
	}
	if d.RunID == "" {
		d.RunID = newRunID()
	}
	if err := d.Validate(); err != nil {
		return d, fmt.Errorf("parent: re-run: %w: %w", ErrBadRequest, err)
	}
	return d, nil
}

// encodeOutput JSON-encodes v, a json.RawMessage as is (checked).
func encodeOutput(v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, errors.New("not valid JSON")
		}
		return raw, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not JSON-encodable: %w", err)
	}
	if len(b) > events.MaxOutputBytes {
		return nil, fmt.Errorf("%d bytes; the limit is %d", len(b), events.MaxOutputBytes)
	}
	return b, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
