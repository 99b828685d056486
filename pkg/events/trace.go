package events

import (
	"strings"
)

// The W3C Trace Context headers (https://www.w3.org/TR/trace-context/),
// carried as NATS headers on a run's dispatch, events and finish, and as
// HTTP headers on POST /v1/runs and finish webhooks.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// maxTraceState bounds a tracestate value (the W3C limit is 32 members of at
// most 256 characters; 512 is what the spec asks carriers to keep).
const maxTraceState = 512

// TraceContext is a run's W3C trace context: the traceparent and tracestate
// of whatever dispatched it. jetrun records no spans of its own; it carries
// the context so a tracing system links the run's events, its finish and
// its handler's work to the trace that dispatched it. The zero value carries
// nothing.
type TraceContext struct {
	// TraceParent is "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>".
	TraceParent string `json:"traceparent,omitempty"`
	// TraceState is vendor data passed along untouched.
	TraceState string `json:"tracestate,omitempty"`
}

// Valid returns tc if its traceparent is well formed (tracestate cut to
// what the spec asks carriers to keep), else the zero TraceContext: a
// malformed trace context is dropped, never an error, so tracing cannot
// stop a run.
func (tc TraceContext) Valid() TraceContext {
	if !validTraceParent(tc.TraceParent) {
		return TraceContext{}
	}
	tc.TraceState = strings.TrimSpace(tc.TraceState)
	if len(tc.TraceState) > maxTraceState || strings.ContainsAny(tc.TraceState, "\r\n") {
		tc.TraceState = ""
	}
	return tc
}

// IsZero reports whether tc carries no trace context.
func (tc TraceContext) IsZero() bool { return tc.TraceParent == "" }

// TraceID is the trace id of tc's traceparent ("" if none).
func (tc TraceContext) TraceID() string {
	if !validTraceParent(tc.TraceParent) {
		return ""
	}
	return tc.TraceParent[3:35]
}

// validTraceParent checks the version-00 layout: a known version, lowercase
// hex fields of the right lengths, and a trace id and parent id that are
// not all zeros. Future versions may append fields after the flags.
func validTraceParent(s string) bool {
	if len(s) < 55 || (len(s) > 55 && (s[:2] == "00" || s[55] != '-')) {
		return false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' || s[:2] == "ff" {
		return false
	}
	for _, f := range []string{s[:2], s[3:35], s[36:52], s[53:55]} {
		for i := 0; i < len(f); i++ {
			if c := f[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return strings.Trim(s[3:35], "0") != "" && strings.Trim(s[36:52], "0") != ""
}
