// Package eventline is the line protocol shared by the agent types that run
// children outside the worker process (http and exec): the request a child
// receives, and the newline-delimited JSON events it answers with, each
// mapped onto the run through the same worker.Run API a Go handler uses.
//
// An event is one JSON object per line with exactly one of these keys
// (other keys are ignored, so events may grow fields):
//
//	{"chunk": <any JSON>}
//	{"progress": {"fraction": 0.5, "phase": "…", "message": "…", "data": <any>}}
//	{"milestone": {"name": "…", "data": <any>}}
//	{"wait": "<signal name>", "ask": {…}}
//	{"call": {"name": "<call name>", "input": <any>, "ask": {…}}}
//	{"step": {"name": "<step name>", "output": <any>}}
//	{"result": {"summary": "…", "output": <any>}}
//	{"error": "…", "retryable": false, "retryAfterMs": 0}
//	{"usage": {"inputTokens": 0, "outputTokens": 0, "costMicros": 0, "model": "…"}}
//	{"reserve": {"inputTokens": 0, "outputTokens": 0, "costMicros": 0}}
//
// "ask" (optional; worker.Ask) says what a person is asked while the run
// waits: {"kind": "approve"|"choose"|"form", "title": "…", "payload": <any>,
// "choices": ["…"], "schema": <JSON Schema>, "deadlineMs": 0, "default": <any>}.
//
// A line that breaks this format is a FormatError: the run ends "error"
// with the line number and the reason; it is never retried. Usage lines
// right before a step line are what the step spent (Applier).
package eventline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Event kinds: the one key an event line carries.
const (
	KindChunk     = "chunk"
	KindProgress  = "progress"
	KindMilestone = "milestone"
	KindWait      = "wait"
	KindCall      = "call"
	KindResult    = "result"
	KindError     = "error"
)

var kinds = []string{KindChunk, KindProgress, KindMilestone, KindWait, KindCall, KindStep, KindResult, KindError, KindUsage, KindReserve}

// Request is what a child receives for a run: the http type POSTs it, the
// exec type writes it as the first line of the command's stdin.
type Request struct {
	RunID            string          `json:"runId"`
	AgentType        string          `json:"agentType"`
	Attempt          int             `json:"attempt"`
	Input            json.RawMessage `json:"input"`
	Milestones       []Milestone     `json:"milestones"`
	Parent           string          `json:"parent,omitempty"`
	ParentToolCallID string          `json:"parentToolCallId,omitempty"`
	Depth            int             `json:"depth"`
	// Steps holds the output of every step the run stored, by name (step.go).
	Steps map[string]json.RawMessage `json:"steps"`
	// Signal is set when the request answers a wait (http: the second
	// request of the run; exec: a later stdin line carries only it).
	Signal *Signal `json:"signal,omitempty"`
	// Reply is set when the request answers a call (http: the request after
	// a call line; exec: a later stdin line carries only it).
	Reply *Reply `json:"reply,omitempty"`
	// Reserved is set when the request answers a reserve line (reserve.go),
	// as Reply is for a call.
	Reserved *Reserved `json:"reserved,omitempty"`
	// Session and History are set for a run dispatched under a session
	// key: its session's earlier turns, oldest first (worker.Run.History).
	Session string               `json:"session,omitempty"`
	History []worker.SessionTurn `json:"history,omitempty"`
}

// Reply is the answer to a child's call: the caller's output, or the error
// its call handler (or a timeout) gave.
type Reply struct {
	Name   string          `json:"name"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// DoCall makes the call ev asks for (worker.Run.Call: durable, parked) and
// returns its reply; a failed call handler or a timeout is a reply with
// Error set. The error is what ends the attempt (a cancel, a lost lease).
func DoCall(ctx context.Context, run *worker.Run, ev Event) (Reply, error) {
	var input any
	if ev.Call.Input != nil {
		input = ev.Call.Input
	}
	out, err := run.Call(ctx, ev.Call.Name, input, ev.Ask...)
	var ce *worker.CallError
	switch {
	case errors.As(err, &ce):
		return Reply{Name: ev.Call.Name, Error: ce.Message}, nil
	case errors.Is(err, worker.ErrCallTimeout) && ctx.Err() == nil:
		return Reply{Name: ev.Call.Name, Error: "call timed out"}, nil
	case err != nil:
		return Reply{}, err
	}
	return Reply{Name: ev.Call.Name, Output: out}, nil
}

// Milestone is a milestone the run already reached, by earlier attempts
// included: a child resumes after the last one instead of redoing work.
type Milestone struct {
	Sequence int             `json:"sequence"`
	Name     string          `json:"name"`
	Data     json.RawMessage `json:"data,omitempty"`
}

// Signal is a signal a waiting child receives.
type Signal struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload"`
}

// NewRequest returns the request for run as it stands now.
func NewRequest(ctx context.Context, run *worker.Run) (Request, error) {
	row := run.Row()
	steps, err := Steps(ctx, run)
	if err != nil {
		return Request{}, err
	}
	history, err := run.History(ctx)
	if err != nil {
		return Request{}, err
	}
	return Request{
		RunID: run.ID(), AgentType: run.AgentType(), Attempt: run.Attempt(), Input: run.Input(),
		Milestones: Milestones(run), Parent: row.Parent, ParentToolCallID: row.ParentToolCallID, Depth: row.Depth,
		Steps: steps, Session: row.Session, History: history,
	}, nil
}

// Milestones returns the run's milestones reached so far, never nil.
func Milestones(run *worker.Run) []Milestone {
	ms := run.Milestones()
	out := make([]Milestone, 0, len(ms))
	for _, m := range ms {
		out = append(out, Milestone{Sequence: m.Sequence, Name: m.Name, Data: m.Data})
	}
	return out
}

// Event is one decoded event line.
type Event struct {
	Kind      string
	Chunk     json.RawMessage
	Progress  worker.Progress
	Milestone struct {
		Name string
		Data json.RawMessage
	}
	Wait string
	Call struct {
		Name  string
		Input json.RawMessage
	}
	// Ask is the wait's or the call's ask, if the line gives one.
	Ask  []worker.Ask
	Step struct {
		Name   string
		Output json.RawMessage
		Usage  []worker.Usage // what the step spent, if the line says
	}
	Result    worker.Result
	Error     string
	Retryable bool
	// RetryAfter is how long a retryable error asks to wait before the
	// next attempt ("retryAfterMs", at most MaxRetryAfter); 0: the
	// worker's growing delay.
	RetryAfter time.Duration
	Usage      worker.Usage
	Reserve    worker.Usage // what a reserve line holds
	// ReserveLimit is the provider limit a reserve line also waits on.
	ReserveLimit string
}

// MaxRetryAfter bounds the wait an error line's "retryAfterMs" asks for.
const MaxRetryAfter = time.Hour

// FormatError is an event line that breaks the format.
type FormatError struct {
	Line   int    // 1-based line number in the response or output
	Reason string // what is wrong with it
}

func (e *FormatError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Parse decodes event line number n.
func Parse(n int, line []byte) (Event, error) {
	bad := func(format string, args ...any) (Event, error) {
		return Event{}, &FormatError{Line: n, Reason: fmt.Sprintf(format, args...)}
	}
	var fields map[string]json.RawMessage
	if t := bytes.TrimSpace(line); len(t) == 0 || t[0] != '{' {
		return bad("not a JSON object: %.60q", line)
	}
	if err := json.Unmarshal(line, &fields); err != nil {
		return bad("not valid JSON: %v", err)
	}
	var present []string
	for _, k := range kinds {
		if _, ok := fields[k]; ok {
			present = append(present, k)
		}
	}
	if len(present) != 1 {
		if len(present) == 0 {
			return bad("no event key; an event line has one of %s", strings.Join(kinds, ", "))
		}
		return bad("more than one event key (%s); an event line has exactly one", strings.Join(present, ", "))
	}
	ev := Event{Kind: present[0]}
	raw := fields[ev.Kind]
	isNull := bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
	switch ev.Kind {
	case KindChunk:
		if isNull {
			return bad(`"chunk" must not be null`)
		}
		ev.Chunk = raw
	case KindProgress:
		var p struct {
			Fraction *float64        `json:"fraction"`
			Phase    string          `json:"phase"`
			Message  string          `json:"message"`
			Data     json.RawMessage `json:"data"`
		}
		if isNull || json.Unmarshal(raw, &p) != nil {
			return bad(`"progress" must be an object {"fraction": 0..1, "phase": "…", "message": "…"}`)
		}
		if p.Fraction != nil && (*p.Fraction < 0 || *p.Fraction > 1) {
			return bad(`"progress.fraction" must be between 0 and 1, got %v`, *p.Fraction)
		}
		ev.Progress = worker.Progress{Phase: p.Phase, Message: p.Message}
		if p.Fraction != nil {
			ev.Progress.Fraction = *p.Fraction
		}
		if len(p.Data) > 0 && !bytes.Equal(p.Data, []byte("null")) {
			ev.Progress.Data = p.Data
		}
	case KindMilestone:
		var m struct {
			Name string          `json:"name"`
			Data json.RawMessage `json:"data"`
		}
		if isNull || json.Unmarshal(raw, &m) != nil {
			return bad(`"milestone" must be an object {"name": "…", "data": …}`)
		}
		if m.Name == "" || len(m.Name) > worker.MaxMilestoneNameLength {
			return bad(`"milestone.name" must be 1 to %d bytes, got %d`, worker.MaxMilestoneNameLength, len(m.Name))
		}
		ev.Milestone.Name = m.Name
		if len(m.Data) > 0 && !bytes.Equal(m.Data, []byte("null")) {
			ev.Milestone.Data = m.Data
		}
	case KindWait:
		if json.Unmarshal(raw, &ev.Wait) != nil || ev.Wait == "" {
			return bad(`"wait" must be a signal name (a string)`)
		}
		if err := events.ValidateToken("signal name", ev.Wait); err != nil {
			return bad(`"wait": %v`, err)
		}
		if reason := parseAsk(fields["ask"], &ev); reason != "" {
			return bad("%s", reason)
		}
	case KindCall:
		var c struct {
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
			Ask   json.RawMessage `json:"ask"`
		}
		if isNull || json.Unmarshal(raw, &c) != nil {
			return bad(`"call" must be an object {"name": "…", "input": …}`)
		}
		if err := events.ValidateToken("call name", c.Name); err != nil {
			return bad(`"call.name": %v`, err)
		}
		ev.Call.Name = c.Name
		if reason := parseAsk(c.Ask, &ev); reason != "" {
			return bad("%s", reason)
		}
		if len(c.Input) > 0 && !bytes.Equal(c.Input, []byte("null")) {
			ev.Call.Input = c.Input
		}
	case KindStep:
		if reason := parseStep(raw, &ev); reason != "" {
			return bad("%s", reason)
		}
	case KindResult:
		var r struct {
			Summary string          `json:"summary"`
			Output  json.RawMessage `json:"output"`
		}
		if isNull || json.Unmarshal(raw, &r) != nil {
			return bad(`"result" must be an object {"summary": "…", "output": …}`)
		}
		ev.Result.Summary = r.Summary
		if len(r.Output) > 0 && !bytes.Equal(r.Output, []byte("null")) {
			ev.Result.Output = r.Output
		}
	case KindUsage:
		var why string
		if ev.Usage, why = parseUsage(raw); why != "" {
			return bad("%s", why)
		}
	case KindReserve:
		var why string
		if ev.Reserve, ev.ReserveLimit, why = parseReserve(raw); why != "" {
			return bad("%s", why)
		}
	case KindError:
		if json.Unmarshal(raw, &ev.Error) != nil || ev.Error == "" {
			return bad(`"error" must be a non-empty string`)
		}
		r, hasRetryable := fields["retryable"]
		if hasRetryable && json.Unmarshal(r, &ev.Retryable) != nil {
			return bad(`"retryable" must be true or false`)
		}
		if raw, ok := fields["retryAfterMs"]; ok {
			var ms int64
			if json.Unmarshal(raw, &ms) != nil || ms < 0 {
				return bad(`"retryAfterMs" must be a whole number of milliseconds, 0 or more`)
			}
			if hasRetryable && !ev.Retryable {
				return bad(`"retryAfterMs" is for a retryable error; this one says "retryable": false`)
			}
			ev.Retryable = true
			ev.RetryAfter = time.Duration(min(ms, MaxRetryAfter.Milliseconds())) * time.Millisecond
		}
	}
	return ev, nil
}

// Apply maps a chunk, progress, milestone, step or usage event onto run,
// each stored (a step, a milestone) or on its way (a chunk, progress, usage)
// when it returns. Other kinds are the caller's to handle.
func Apply(ctx context.Context, run *worker.Run, ev Event) error {
	switch ev.Kind {
	case KindChunk:
		return run.Chunk(ctx, ev.Chunk)
	case KindProgress:
		return run.Progress(ctx, ev.Progress)
	case KindMilestone:
		var data any
		if ev.Milestone.Data != nil {
			data = ev.Milestone.Data
		}
		_, err := run.Milestone(ctx, ev.Milestone.Name, data)
		return err
	case KindStep:
		return storeStep(ctx, run, ev, nil)
	case KindUsage:
		return run.Usage(ctx, ev.Usage)
	}
	return fmt.Errorf("eventline: %s is not a run event", ev.Kind)
}

// Failure returns the error an error event ends the attempt with: the
// child's text, marked jetruntype.RetryAfter when it asked for a retry
// (after its retryAfterMs, else the worker's growing delay).
func Failure(ev Event) error {
	err := errors.New(ev.Error)
	if ev.Retryable {
		return jetruntype.RetryAfter(err, ev.RetryAfter)
	}
	return err
}

// Kinds lists the event keys.
func Kinds() []string { return slices.Clone(kinds) }

// parseAsk reads an "ask" object into ev.Ask (nothing when raw is empty
// or null); a reason when it is malformed.
func parseAsk(raw json.RawMessage, ev *Event) string {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return ""
	}
	var a struct {
		Kind       string          `json:"kind"`
		Title      string          `json:"title"`
		Payload    json.RawMessage `json:"payload"`
		Choices    []string        `json:"choices"`
		Schema     json.RawMessage `json:"schema"`
		DeadlineMs int64           `json:"deadlineMs"`
		Default    json.RawMessage `json:"default"`
	}
	const want = `"ask" must be an object {"kind": "approve"|"choose"|"form", "title", "payload", "choices", "schema", "deadlineMs", "default"}`
	if json.Unmarshal(raw, &a) != nil || a.DeadlineMs < 0 {
		return want
	}
	switch a.Kind {
	case "", events.AskApprove, events.AskChoose, events.AskForm:
	default:
		return fmt.Sprintf(`"ask.kind" must be approve, choose or form, got %q`, a.Kind)
	}
	if a.Kind == events.AskChoose && len(a.Choices) == 0 {
		return `"ask.choices" must list the options of a choose ask`
	}
	wa := worker.Ask{Kind: a.Kind, Title: a.Title, Choices: a.Choices, Schema: a.Schema,
		Deadline: time.Duration(a.DeadlineMs) * time.Millisecond}
	if len(a.Payload) > 0 {
		wa.Payload = a.Payload
	}
	if len(a.Default) > 0 {
		wa.Default = a.Default
	}
	ev.Ask = []worker.Ask{wa}
	return ""
}
