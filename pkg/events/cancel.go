package events

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// CancelEvent is published on jetrun.run.<id>.cancel after a cancel request
// was recorded on the run's row. The row is the record; the event is how
// the worker holding the run hears of it within milliseconds: each worker
// process follows every run's cancel subject with one ordered consumer, so
// no per-run watch is needed, and a worker that was disconnected resumes
// where it stopped.
type CancelEvent struct {
	RunID  string    `json:"runId"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// PublishCancel publishes the cancel event of run id.
func PublishCancel(ctx context.Context, js jetstream.JetStream, ns Namespace, id, reason string) error {
	data, err := json.Marshal(CancelEvent{RunID: id, Reason: reason, At: time.Now()})
	if err != nil {
		return fmt.Errorf("events: encode cancel of run %s: %w", id, err)
	}
	if _, err := js.Publish(ctx, ns.RunSubject(id, KindCancel), data); err != nil {
		return fmt.Errorf("events: publish cancel of run %s: %w", id, err)
	}
	return nil
}
