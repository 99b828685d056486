// Package obs publishes jetrun's recovery and delivery events as JSON
// messages on core NATS subjects jetrun.obs.<event>, so an operator can
// follow them with `nats sub 'jetrun.obs.>'`, and keeps fault warnings to a
// bounded rate (Throttle).
//
// jetrun's packages only log: an event is a log record with an "event"
// attribute (Report, Debug). A process that wants the events on NATS wraps
// its log handler with NewHandler, which publishes each such record once
// and passes every record on, so nothing is logged twice and no package
// needs a reporter of its own. Observability messages are not stored and
// never block: a failed publish is dropped.
package obs

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// The events jetrun reports.
const (
	ReconcileBegin  = "reconcile.begin"
	RunRecovered    = "run.recovered"
	FinishDelivered = "finish.delivered"
	FinishFailed    = "finish.failed"
	FinishRetry     = "finish.retry"
	// FinishUnserved: no deliverer has taken a finish and none follows
	// its handler.
	FinishUnserved   = "finish.unserved"
	BudgetExceeded   = "budget.exceeded"
	LeaderAcquired   = "reconcile.leader"
	RunCascadeCancel = "run.cancelled"
	// RunStarted and RunFinished meter every run's starts (one per
	// attempt) and finishes (package meter).
	RunStarted  = "run.started"
	RunFinished = "run.finished"
)

// The attributes of a log record that make it an event.
const (
	// EventKey names the event (one of the constants above).
	EventKey = "event"
	// RunIDKey names the run the event is about, if any.
	RunIDKey = "run_id"
)

// Event is the JSON body published on jetrun.obs.<event>.
type Event struct {
	Event  string         `json:"event"`
	At     time.Time      `json:"at"`
	Source string         `json:"source,omitempty"`
	RunID  string         `json:"runId,omitempty"`
	Attrs  map[string]any `json:"attrs,omitempty"`
}

// Report logs event about run id (may be empty) at info level to log, with
// attributes given as alternating keys and values. Under a NewHandler it
// is also published.
func Report(ctx context.Context, log *slog.Logger, event, runID string, args ...any) {
	report(ctx, log, slog.LevelInfo, event, runID, args)
}

// Debug is Report for routine events (one per run, say), logged at debug
// level; NewHandler publishes them whatever the log level.
func Debug(ctx context.Context, log *slog.Logger, event, runID string, args ...any) {
	report(ctx, log, slog.LevelDebug, event, runID, args)
}

func report(ctx context.Context, log *slog.Logger, level slog.Level, event, runID string, args []any) {
	if log == nil || !log.Enabled(ctx, level) {
		return
	}
	attrs := make([]any, 0, len(args)+4)
	attrs = append(attrs, EventKey, event)
	if runID != "" {
		attrs = append(attrs, RunIDKey, runID)
	}
	log.Log(ctx, level, event, append(attrs, args...)...)
}

// NewHandler returns a log handler that passes every record to next and
// publishes each event record (one with an EventKey attribute) with nc
// under ns, naming source (a process or component id) in it. Event records
// are published at every level, even those next leaves out.
func NewHandler(next slog.Handler, nc *nats.Conn, ns wire.Namespace, source string) slog.Handler {
	return &handler{next: next, nc: nc, subject: ns.ObsSubject, source: source}
}

type handler struct {
	next    slog.Handler
	nc      *nats.Conn
	subject func(event string) string
	source  string
	attrs   []slog.Attr // from WithAttrs, outside any group
	grouped bool        // WithGroup was called: later attributes are not the event's
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelDebug || h.next.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	h.publish(r)
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *handler) publish(r slog.Record) {
	ev := Event{At: r.Time, Source: h.source}
	var attrs map[string]any
	add := func(a slog.Attr) bool {
		switch a.Key {
		case EventKey:
			ev.Event = a.Value.String()
		case RunIDKey:
			ev.RunID = a.Value.String()
		default:
			if attrs == nil {
				attrs = make(map[string]any)
			}
			attrs[a.Key] = attrValue(a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	if !h.grouped {
		r.Attrs(add)
	}
	if ev.Event == "" || h.nc == nil {
		return
	}
	ev.Attrs = attrs
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	_ = h.nc.Publish(h.subject(ev.Event), data)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(attrs)
	if !h.grouped {
		c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	}
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.grouped = true
	return &c
}

// attrValue is a's value as JSON shows it: errors, durations and
// statuses as strings.
func attrValue(v slog.Value) any {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindTime:
		return v.Time()
	case slog.KindAny:
		switch t := v.Any().(type) {
		case error:
			return t.Error()
		case events.Status:
			return string(t)
		}
		return v.Any()
	}
	return v.Any()
}
