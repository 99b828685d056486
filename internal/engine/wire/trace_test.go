package wire_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestTraceContextValid(t *testing.T) {
	t.Parallel()
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tt := range []struct {
		in      string
		wantOK  bool
		traceID string
	}{
		{good, true, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"", false, ""},
		{good + "-extra", false, ""}, // version 00 has no more fields
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, ""},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", false, ""},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, ""},
	} {
		tc := events.TraceContext{TraceParent: tt.in, TraceState: "k=v"}.Valid()
		if got := !tc.IsZero(); got != tt.wantOK || tc.TraceID() != tt.traceID {
			t.Errorf("Valid(%q) = %+v (trace id %q), want ok %v trace id %q", tt.in, tc, tc.TraceID(), tt.wantOK, tt.traceID)
		}
	}
	h := nats.Header{}
	wire.SetTraceHeaders(events.TraceContext{TraceParent: good, TraceState: "a=1"}, h)
	if got := wire.TraceFromHeaders(h); got.TraceParent != good || got.TraceState != "a=1" {
		t.Fatalf("TraceFromHeaders = %+v", got)
	}
	if got := wire.TraceFromHeaders(nats.Header{"Traceparent": {good}}); got.TraceParent != good {
		t.Fatalf("canonicalized header not read: %+v", got)
	}
	if got := wire.TraceFromHeaders(nats.Header{"traceparent": {"junk"}}); !got.IsZero() {
		t.Fatalf("junk traceparent kept: %+v", got)
	}
}

func FuzzTraceContext(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		tc := events.TraceContext{TraceParent: tp, TraceState: ts}.Valid()
		if !tc.IsZero() && len(tc.TraceID()) != 32 {
			t.Fatalf("valid %q has trace id %q", tp, tc.TraceID())
		}
	})
}
