package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/events"
)

// Ask says what a person is asked while the run waits, shown in the asks
// inbox (GET /v1/asks, `jetrun asks`, the web UI) and answered there.
// Every Run.Wait is an ask (without one: a form taking any JSON value,
// whose payload is the signal's name); a Run.Call is an ask when given
// one: a call meant for a person, answered through the inbox as well as
// by a call server.
type Ask struct {
	// Kind is events.AskApprove (the answer is {"approved": bool}),
	// events.AskChoose ({"choice": one of Choices}) or events.AskForm (a
	// value matching Schema; the default).
	Kind string
	// Title is a line saying what is asked.
	Title string
	// Payload is what the person is shown and approves (any
	// JSON-encodable value): its digest is recorded with the answer, and
	// an answer given for an earlier payload is refused. A call's input
	// when nil.
	Payload any
	// Choices are the options of a choose ask.
	Choices []string
	// Schema is the JSON Schema a form's answer must match.
	Schema json.RawMessage
	// Deadline, if set, is how long the ask waits for a person: then
	// Default is given as the answer (by "deadline").
	Deadline time.Duration
	Default  any
}

// spec checks the ask and encodes it for run id: the events.Ask a wait
// stores, without its id and wait fields. fallback is the payload when
// a has none.
func (a Ask) spec(id string, fallback json.RawMessage) (*events.Ask, error) {
	out := &events.Ask{Kind: cmp.Or(a.Kind, events.AskForm), Title: a.Title, Choices: a.Choices, Schema: a.Schema, Payload: fallback}
	switch out.Kind {
	case events.AskApprove, events.AskForm:
	case events.AskChoose:
		if len(a.Choices) == 0 {
			return nil, errors.New("worker: a choose ask needs Choices")
		}
	default:
		return nil, fmt.Errorf("worker: ask kind %q is not approve, choose or form", a.Kind)
	}
	if len(a.Schema) > 0 && !json.Valid(a.Schema) {
		return nil, errors.New("worker: the ask's schema is not valid JSON")
	}
	if a.Payload != nil {
		raw, err := encodePayload(id, "ask payload", a.Payload)
		if err != nil {
			return nil, err
		}
		out.Payload = raw
	}
	if a.Deadline > 0 {
		raw, err := encodePayload(id, "ask default", a.Default)
		if err != nil {
			return nil, err
		}
		if raw, err = asks.CheckValue(out, raw); err != nil {
			return nil, fmt.Errorf("worker: the ask's default: %w", err)
		}
		out.Default = raw
		deadline := time.Now().Add(a.Deadline).UTC()
		out.Deadline = &deadline
	}
	return out, nil
}

// askTimeout bounds the writes of an ask: a wait goes on without its ask
// rather than hang on the asks bucket.
const askTimeout = 5 * time.Second

// openAsk stores the ask of a wait (spec filled in with the wait's id and
// fields); "" when it could not be stored: the wait goes on, unlisted.
func (e *execution) openAsk(ctx context.Context, spec *events.Ask) string {
	st := e.w.rt.Asks()
	spec.RunID, spec.AgentType, spec.TreeID = e.id, e.row.AgentType, cmp.Or(e.row.Root, e.id)
	spec.AskedAt = time.Now().UTC()
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	a, err := st.Ensure(ctx, *spec)
	if err != nil {
		e.w.fault(ctx, e.log, "store the ask of a wait; the wait goes on unlisted", err)
		return ""
	}
	e.log.DebugContext(ctx, "ask open", "ask_id", a.ID, "ask_status", a.Status)
	return a.ID
}

// settleAsk records how the wait of ask id ended: with value (received,
// from by), or with err. A wait that ends because the attempt lost the
// run or its worker stops leaves the ask open: the next attempt waits
// again on it.
func (e *execution) settleAsk(ctx context.Context, id string, value json.RawMessage, by string, err error) {
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), askTimeout)
	defer cancel()
	st := e.w.rt.Asks()
	switch {
	case err == nil:
		_, err = st.Received(ctx, id, value, by)
	case errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrShuttingDown):
		return
	case errors.Is(err, ErrCancelled):
		_, err = st.Close(ctx, id, "run cancelled")
	case errors.Is(err, ErrCallTimeout):
		_, err = st.Close(ctx, id, "timed out")
	default:
		_, err = st.Close(ctx, id, "wait ended: "+err.Error())
	}
	if err != nil {
		e.w.fault(ctx, e.log, "settle the ask of a wait", err)
	}
}
