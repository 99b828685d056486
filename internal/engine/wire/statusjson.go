package wire

import (
	"encoding/json"

	"github.com/jetrun/jetrun/internal/engine/jsonenc"
	"github.com/jetrun/jetrun/pkg/events"
)

// EncodeStatusEvent writes ev as json.Marshal does, byte for byte, without
// reflection: every run's ending publishes one (Marshal's reflection was
// about a tenth of a short run's CPU in the worker).
func EncodeStatusEvent(ev *events.StatusEvent) ([]byte, error) {
	b := make([]byte, 0, 256)
	b = append(b, `{"runId":`...)
	b = jsonenc.String(b, ev.RunID)
	b = append(b, `,"status":`...)
	b = jsonenc.String(b, string(ev.Status))
	if ev.Reason != "" {
		b = jsonenc.String(append(b, `,"reason":`...), ev.Reason)
	}
	if ev.Error != "" {
		b = jsonenc.String(append(b, `,"error":`...), ev.Error)
	}
	if ev.Retryable {
		b = append(b, `,"retryable":true`...)
	}
	if ev.ChildStillRunning {
		b = append(b, `,"childStillRunning":true`...)
	}
	if ev.Attempt != 0 {
		b = jsonenc.Int(append(b, `,"attempt":`...), int64(ev.Attempt))
	}
	if ev.Worker != "" {
		b = jsonenc.String(append(b, `,"worker":`...), ev.Worker)
	}
	var ok bool
	if b, ok = jsonenc.Time(append(b, `,"at":`...), ev.At); !ok {
		return json.Marshal(ev) // its error
	}
	if ev.AgentType != "" {
		b = jsonenc.String(append(b, `,"agentType":`...), ev.AgentType)
	}
	if ev.Parent != "" {
		b = jsonenc.String(append(b, `,"parent":`...), ev.Parent)
	}
	if !ev.StartedAt.IsZero() {
		if b, ok = jsonenc.Time(append(b, `,"startedAt":`...), ev.StartedAt); !ok {
			return json.Marshal(ev)
		}
	}
	if ev.Usage != nil {
		var err error
		if b, err = jsonenc.Value(append(b, `,"usage":`...), ev.Usage); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}
