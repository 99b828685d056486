// Package obs reports recovery and delivery events twice: as slog lines and
// as JSON messages on core NATS subjects jetrun.obs.<event>, so an operator
// can follow them with `nats sub 'jetrun.obs.>'`. Observability messages are
// not stored and never block: a failed publish is dropped.
package obs

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

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

// Event is the JSON body published on jetrun.obs.<event>.
type Event struct {
	Event  string         `json:"event"`
	At     time.Time      `json:"at"`
	Source string         `json:"source,omitempty"`
	RunID  string         `json:"runId,omitempty"`
	Attrs  map[string]any `json:"attrs,omitempty"`
}

// Reporter reports events. The zero value logs nowhere and publishes
// nothing.
type Reporter struct {
	nc     *nats.Conn
	ns     events.Namespace
	log    *slog.Logger
	source string
}

// New returns a Reporter publishing with nc (nil: log only) under ns, logging
// to logger, naming source (a process or component id) in every event.
func New(nc *nats.Conn, ns events.Namespace, logger *slog.Logger, source string) *Reporter {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Reporter{nc: nc, ns: ns, log: logger, source: source}
}

// Report logs (at info level) and publishes event about run id (may be
// empty) with attributes given as alternating keys and values.
func (r *Reporter) Report(ctx context.Context, event, runID string, kv ...any) {
	r.report(ctx, slog.LevelInfo, event, runID, kv...)
}

// Debug is Report for routine events, logged at debug level.
func (r *Reporter) Debug(ctx context.Context, event, runID string, kv ...any) {
	r.report(ctx, slog.LevelDebug, event, runID, kv...)
}

func (r *Reporter) report(ctx context.Context, level slog.Level, event, runID string, kv ...any) {
	if r == nil || r.log == nil {
		return
	}
	args := append([]any{"event", event}, kv...)
	if runID != "" {
		args = append(args, "run_id", runID)
	}
	r.log.Log(ctx, level, event, args...)
	if r.nc == nil {
		return
	}
	ev := Event{Event: event, At: time.Now(), Source: r.source, RunID: runID}
	if len(kv) > 0 {
		ev.Attrs = make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			if k, ok := kv[i].(string); ok {
				ev.Attrs[k] = attrValue(kv[i+1])
			}
		}
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	_ = r.nc.Publish(r.ns.ObsSubject(event), data)
}

func attrValue(v any) any {
	switch t := v.(type) {
	case error:
		return t.Error()
	case time.Duration:
		return t.String()
	case events.Status:
		return string(t)
	}
	return v
}
