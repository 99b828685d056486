package worker

import (
	"context"

	"github.com/jetrun/jetrun/pkg/events"
)

// A run's trace context: the W3C traceparent and tracestate it was
// dispatched with (the dispatch's headers, else its traceparent and
// tracestate fields), kept on its row. The worker sets them as headers on
// every event it publishes for the run, puts them in the handler's context,
// and adds the trace id to the run's log lines (trace_id). jetrun records
// no spans; a handler that uses OpenTelemetry extracts the context with
// propagation.TraceContext{} and a carrier over TraceContext (see
// docs/protocol.md).

type traceKey struct{}

// withTrace returns ctx carrying tc (ctx itself when tc is zero).
func withTrace(ctx context.Context, tc events.TraceContext) context.Context {
	if tc.IsZero() {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, tc)
}

// TraceContext returns the trace context of the run whose handler ctx
// belongs to (zero if the run was dispatched without one).
func TraceContext(ctx context.Context) events.TraceContext {
	tc, _ := ctx.Value(traceKey{}).(events.TraceContext)
	return tc
}
