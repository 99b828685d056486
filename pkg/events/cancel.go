package events

import (
	"time"
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
