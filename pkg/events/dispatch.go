package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxParentToolCallIDLength bounds Dispatch.ParentToolCallID.
const MaxParentToolCallIDLength = 256

// Dispatch asks for one run of an agent type. It is published to
// jetrun.dispatch.<agentType> with Nats-Msg-Id set to the run id. Only Input is
// required from other services; see Decode for how a missing RunID is filled.
type Dispatch struct {
	RunID            string          `json:"runId,omitempty"`
	Input            json.RawMessage `json:"input"`
	Parent           string          `json:"parent,omitempty"`
	ParentToolCallID string          `json:"parentToolCallId,omitempty"`
	DisplayOrder     int             `json:"displayOrder,omitempty"`
	Depth            int             `json:"depth,omitempty"`
	Detached         *Detached       `json:"detached,omitempty"`
	// ConcurrencyKey, Strategy and DebounceMs govern overlapping runs under
	// one key (submit.go).
	ConcurrencyKey string   `json:"concurrencyKey,omitempty"`
	Strategy       Strategy `json:"strategy,omitempty"`
	DebounceMs     int64    `json:"debounceMs,omitempty"`
	// TraceParent and TraceState are the W3C trace context of whatever
	// dispatched the run, for producers that cannot set the traceparent and
	// tracestate headers; the headers win when both are given. A malformed
	// traceparent is dropped (see TraceContext.Valid).
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Budget bounds what this run and the runs nested under it spend
	// (usage.go). Root is the id of the top of the run's tree (empty for a
	// top-level run) and BudgetFrom the ids of its ancestors that carry a
	// budget it draws from; the parent API fills both for a nested run.
	Budget     *TreeBudget `json:"budget,omitempty"`
	Root       string      `json:"root,omitempty"`
	BudgetFrom []string    `json:"budgetFrom,omitempty"`
	// Session names the sub-agent session the run is a turn of: runs of
	// one agent type under one session see its earlier turns as their
	// history (docs/protocol.md, "Sub-agents").
	Session string `json:"session,omitempty"`
	// Tenant is whose run this is, for the fair share of a provider limit
	// among the reservations that wait on it (a token; empty: "default").
	// Data only: nothing else reads it.
	Tenant string `json:"tenant,omitempty"`
}

// ErrBadDispatch is returned (wrapped, with the reason) by DecodeDispatch and
// Dispatch.Validate.
var ErrBadDispatch = errors.New("bad dispatch")

// DecodeDispatch parses and validates a dispatch payload. It never panics; the
// error says what was wrong in words fit for a dead-letter reason.
func DecodeDispatch(data []byte) (Dispatch, error) {
	var d Dispatch
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return d, fmt.Errorf("%w: payload is empty; expected a JSON object", ErrBadDispatch)
	}
	if trimmed[0] != '{' {
		return d, fmt.Errorf("%w: payload is not a JSON object (it starts with %q)", ErrBadDispatch, preview(trimmed))
	}
	if fast, ok := decodeDispatchFast(trimmed); ok {
		d = fast
	} else if err := json.Unmarshal(trimmed, &d); err != nil {
		return Dispatch{}, fmt.Errorf("%w: %s", ErrBadDispatch, describeJSONError(err))
	}
	if err := d.Validate(); err != nil {
		return Dispatch{}, err
	}
	return d, nil
}

// Validate checks every field of d. A dispatch without RunID is valid: the
// receiver derives one.
func (d *Dispatch) Validate() error {
	var errs []error
	if d.RunID != "" {
		if err := ValidateID(d.RunID); err != nil {
			errs = append(errs, err)
		}
	}
	if len(d.Input) == 0 || bytes.Equal(bytes.TrimSpace(d.Input), []byte("null")) {
		errs = append(errs, errors.New(`"input" is required`))
	} else if len(d.Input) > MaxInputBytes {
		errs = append(errs, fmt.Errorf(`"input" is %d bytes; the limit is %d`, len(d.Input), MaxInputBytes))
	}
	if d.Parent != "" {
		if err := ValidateID(d.Parent); err != nil {
			errs = append(errs, fmt.Errorf(`"parent": %w`, err))
		}
	}
	if len(d.ParentToolCallID) > MaxParentToolCallIDLength {
		errs = append(errs, fmt.Errorf(`"parentToolCallId" is %d characters; the limit is %d`,
			len(d.ParentToolCallID), MaxParentToolCallIDLength))
	}
	if d.Depth < 0 {
		errs = append(errs, fmt.Errorf(`"depth" must not be negative, got %d`, d.Depth))
	}
	if det := d.Detached; det != nil {
		if det.OnFinish != "" {
			if err := ValidateToken("handler name", det.OnFinish); err != nil {
				errs = append(errs, fmt.Errorf(`"detached.onFinish": %w`, err))
			}
		}
		errs = append(errs, det.validateMilestones()...)
	}
	if d.Tenant != "" {
		if err := ValidateToken("tenant", d.Tenant); err != nil {
			errs = append(errs, fmt.Errorf(`"tenant": %w`, err))
		}
	}
	errs = append(errs, d.validateKey()...)
	errs = append(errs, d.validateTree()...)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadDispatch, errors.Join(errs...))
	}
	return nil
}

// describeJSONError turns encoding/json errors into sentences that name the
// offending field.
func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := typeErr.Field
		if field == "" {
			return fmt.Sprintf("expected a JSON object, got %s", typeErr.Value)
		}
		return fmt.Sprintf("field %q must be %s, got %s", field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	}
	return "malformed JSON: " + err.Error()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "struct", "map", "ptr":
		return "an object"
	case "slice", "array":
		return "an array"
	}
	return "a " + goKind
}

func preview(b []byte) string {
	const n = 16
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
