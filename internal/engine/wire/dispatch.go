package wire

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/pkg/events"
)

// Operations on the contract's messages that only the engine needs: trace
// headers, key strategies, budgets, notices.

// SetTraceHeaders sets tc's headers on h (nothing when tc is zero).
func SetTraceHeaders(tc events.TraceContext, h nats.Header) {
	if tc.TraceParent == "" {
		return
	}
	h.Set(events.HeaderTraceParent, tc.TraceParent)
	if tc.TraceState != "" {
		h.Set(events.HeaderTraceState, tc.TraceState)
	}
}

// TraceFromHeaders reads a valid trace context from h (zero if none). The
// names match in any case: NATS headers are case-sensitive, and a producer
// may have set them canonicalized ("Traceparent", as Go's http.Header does).
func TraceFromHeaders(h nats.Header) events.TraceContext {
	return events.TraceContext{TraceParent: headerFold(h, events.HeaderTraceParent), TraceState: headerFold(h, events.HeaderTraceState)}.Valid()
}

// headerFold is h's first value for name, matched exactly, else in any case.
func headerFold(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			return vs[0]
		}
	}
	return ""
}

// TakeTrace settles d's trace context as a receiver of the dispatch message
// does: the message's headers h, else d's own fields; a malformed one is
// dropped.
func TakeTrace(d *events.Dispatch, h nats.Header) {
	tc := TraceFromHeaders(h)
	if tc.IsZero() {
		tc = DispatchTrace(*d)
	}
	SetTrace(d, tc)
}

// SetTrace sets d's trace context fields from tc.
func SetTrace(d *events.Dispatch, tc events.TraceContext) {
	d.TraceParent, d.TraceState = tc.TraceParent, tc.TraceState
}

// OrQueue returns s, or StrategyQueue when s is empty.
func OrQueue(s events.Strategy) events.Strategy {
	if s == "" {
		return events.StrategyQueue
	}
	return s
}

// Debounce returns the quiet window of debounce dispatch d.
func Debounce(d *events.Dispatch) time.Duration {
	if d.DebounceMs > 0 {
		return time.Duration(d.DebounceMs) * time.Millisecond
	}
	return events.DefaultDebounce
}

// IsMilestoneNotice reports whether data, a message on a finish subject, is a
// milestone notice rather than a finish.
func IsMilestoneNotice(data []byte) bool {
	var k struct {
		Kind string `json:"kind"`
	}
	return json.Unmarshal(data, &k) == nil && k.Kind == events.KindMilestoneNotice
}

// Notifies reports whether d asks for a notice of milestone name.
func Notifies(d *events.Detached, name string) bool {
	return d != nil && d.OnFinish != "" && slices.Contains(d.OnMilestones, name)
}

// Budget returns the budget ms sets given the default def, and false when
// ms disables it (BudgetNever or any negative value).
func Budget(ms int64, def time.Duration) (time.Duration, bool) {
	switch {
	case ms > 0:
		return time.Duration(ms) * time.Millisecond, true
	case ms < 0:
		return 0, false
	}
	return def, def > 0
}

// ParseStatuses parses a comma-separated list of statuses ("running,error");
// blanks are skipped, an unknown status is an error.
func ParseStatuses(list string) ([]events.Status, error) {
	var out []events.Status
	for _, part := range strings.Split(list, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		s := events.Status(part)
		if !s.Valid() {
			return nil, fmt.Errorf("unknown status %q", part)
		}
		out = append(out, s)
	}
	return out, nil
}

// DispatchTrace returns d's trace context (zero if it has none or it is
// malformed).
func DispatchTrace(d events.Dispatch) events.TraceContext {
	return events.TraceContext{TraceParent: d.TraceParent, TraceState: d.TraceState}.Valid()
}
