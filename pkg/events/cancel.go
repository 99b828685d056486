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
//
// Attempt is the run's attempt the cancel was recorded for: a worker acts
// on an event only for that attempt, so a late copy of an earlier
// attempt's cancel (a retried run's) does not stop the new one. An event
// without it is checked against the row.
type CancelEvent struct {
	RunID   string    `json:"runId"`
	Reason  string    `json:"reason,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	At      time.Time `json:"at"`
}
