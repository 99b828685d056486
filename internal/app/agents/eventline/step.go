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
// with an optional "usage" ({"inputTokens", …} as a usage line, or an
// array of them, one per model call): what the step spent, counted on the
// run as a usage line is and stored with the step in the same write (a
// step stored already is not counted again). Usage lines right before a
// step line are the step's too (Applier), unless the reader is held up
// longer than UsageHold between them: a step's usage belongs on its line.
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
		Usage  json.RawMessage `json:"usage"`
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) || json.Unmarshal(raw, &s) != nil {
		return `"step" must be an object {"name": "…", "output": …}`
	}
	if err := events.ValidateStepName(s.Name); err != nil {
		return fmt.Sprintf(`"step.name": %v`, err)
	}
	usage, reason := parseStepUsage(s.Usage)
	if reason != "" {
		return reason
	}
	ev.Step.Name = s.Name
	ev.Step.Output = s.Output
	ev.Step.Usage = usage
	if len(ev.Step.Output) == 0 {
		ev.Step.Output = json.RawMessage("null")
	}
	return ""
}

// maxStepUsages bounds the usage reports on one step line.
const maxStepUsages = 1000

// parseStepUsage decodes a step line's "usage": absent or null, one usage
// object, or an array of them; reason says what is wrong.
func parseStepUsage(raw json.RawMessage) (us []worker.Usage, reason string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, ""
	}
	if raw[0] == '[' {
		if err := json.Unmarshal(raw, &us); err != nil {
			return nil, `"step.usage" must be a usage object or an array of them`
		}
		if len(us) > maxStepUsages {
			return nil, fmt.Sprintf(`"step.usage": %d reports, at most %d`, len(us), maxStepUsages)
		}
	} else {
		var u worker.Usage
		if err := json.Unmarshal(raw, &u); err != nil {
			return nil, `"step.usage" must be a usage object or an array of them`
		}
		us = []worker.Usage{u}
	}
	for i, u := range us {
		if err := u.Validate(); err != nil {
			if len(us) == 1 && raw[0] != '[' {
				return nil, fmt.Sprintf(`"step.usage": %v`, err)
			}
			return nil, fmt.Sprintf(`"step.usage[%d]": %v`, i, err)
		}
	}
	return us, ""
}

// storeStep stores the step ev carries through worker.Run.Step, with the
// usage lines held right before it (Applier): what the step spent, with
// the step line's own usage. A step stored already is not stored again:
// the held usage is then the run's (the child did the work again).
func storeStep(ctx context.Context, run *worker.Run, ev Event, held []worker.Usage) error {
	spent := append(held[:len(held):len(held)], ev.Step.Usage...)
	ran := false
	_, err := run.Step(ctx, ev.Step.Name, func(ctx context.Context) (any, error) {
		ran = true
		if err := report(ctx, run, spent); err != nil { // the step's
			return nil, err
		}
		return ev.Step.Output, nil
	})
	if err != nil || ran {
		return err
	}
	return report(ctx, run, held)
}

// report reports every usage of us (each was spent), and returns the first
// error.
func report(ctx context.Context, run *worker.Run, us []worker.Usage) error {
	var first error
	for _, u := range us {
		if err := run.Usage(ctx, u); err != nil && first == nil {
			first = err
		}
	}
	return first
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
