package eventline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// KindStep stores a durable step: {"step": {"name": "…", "output": <any>}},
// with an optional "usage" ({"inputTokens", …} as a usage line): what the
// step spent, counted on the run as a usage line is and stored with the
// step (a step stored already is not counted again).
// The run's next request carries it in "steps", so a child that is run
// again (a takeover, a retry) finds the work done. It is stored before any
// later line of the child is acted on. A name already stored keeps its
// first output.
const KindStep = "step"

// parseStep decodes the value of a step line; reason says what is wrong.
func parseStep(raw json.RawMessage, ev *Event) (reason string) {
	var s struct {
		Name   string          `json:"name"`
		Output json.RawMessage `json:"output"`
		Usage  *worker.Usage   `json:"usage"`
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) || json.Unmarshal(raw, &s) != nil {
		return `"step" must be an object {"name": "…", "output": …}`
	}
	if err := events.ValidateStepName(s.Name); err != nil {
		return fmt.Sprintf(`"step.name": %v`, err)
	}
	if s.Usage != nil {
		if err := s.Usage.Validate(); err != nil {
			return fmt.Sprintf(`"step.usage": %v`, err)
		}
	}
	ev.Step.Name = s.Name
	ev.Step.Output = s.Output
	ev.Step.Usage = s.Usage
	if len(ev.Step.Output) == 0 {
		ev.Step.Output = json.RawMessage("null")
	}
	return ""
}

// storeStep stores the step ev carries through worker.Run.Step.
func storeStep(ctx context.Context, run *worker.Run, ev Event) error {
	_, err := run.Step(ctx, ev.Step.Name, func(ctx context.Context) (any, error) {
		if ev.Step.Usage != nil {
			// What the step spent: counted as a usage line, and the step's.
			if err := run.Usage(ctx, *ev.Step.Usage); err != nil {
				return nil, err
			}
		}
		return ev.Step.Output, nil
	})
	return err
}

// Steps returns the outputs of the steps the run stored, by name, never
// nil: a request's "steps". A step a Go handler failed permanently has no
// output and is left out.
func Steps(ctx context.Context, run *worker.Run) (map[string]json.RawMessage, error) {
	stored, err := run.Steps(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(stored))
	for _, st := range stored {
		if st.Error == "" {
			out[st.Name] = st.Output
		}
	}
	return out, nil
}
