package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// KindStep is the kind of a run's durable step: the stored output of one
// named piece of work (a model call, a tool call), on jetrun.run.<id>.step.
const KindStep = "step"

// MaxStepNameLength bounds a step name.
const MaxStepNameLength = 128

// Step is a step a run completed, published once on jetrun.run.<id>.step
// with Nats-Msg-Id <runId>.step.<name> (StepMsgID). A later attempt of the
// run gets Output back instead of doing the work again. Error, when set,
// is a permanent failure stored in place of an output (Output is null).
type Step struct {
	RunID  string          `json:"runId"`
	Name   string          `json:"name"`
	Output json.RawMessage `json:"output"`
	Error  string          `json:"error,omitempty"`
	// Attempt is the attempt that did the work.
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	// DurationMs is how long the work took, when known.
	DurationMs int64 `json:"durationMs,omitempty"`
	// Usage is what the work spent, when it reported any: the usage
	// reported with the step's context (worker.Run.Usage inside the step's
	// function), or on the step line of a child. It is also in the run's
	// totals.
	Usage *Usage `json:"usage,omitempty"`
	// GivenFrom, on a step a re-run was given back stored, names the run
	// it was copied from: its work was not done by this run, and it
	// carries no usage, so it counts nothing here (its cost stays on that
	// run).
	GivenFrom string `json:"givenFrom,omitempty"`
}

// ValidateStepName reports whether name can name a step: 1 to
// MaxStepNameLength bytes of letters, digits and '-', '_', '.', ':'. Names
// are unique per run: a loop names its steps "plan-1", "plan-2"…
func ValidateStepName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: step name is empty", ErrInvalidID)
	}
	if len(name) > MaxStepNameLength {
		return fmt.Errorf("%w: step name is %d bytes long; the limit is %d", ErrInvalidID, len(name), MaxStepNameLength)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !tokenByte(c) && c != '.' && c != ':' {
			return fmt.Errorf("%w: step name %.80q has %q at position %d; only letters, digits, '-', '_', '.' and ':' are allowed",
				ErrInvalidID, name, c, i)
		}
	}
	return nil
}
