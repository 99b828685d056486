package events

import (
	"errors"
	"fmt"
	"time"
)

// Stream defaults, used where StreamOptions leaves a field zero.
const (
	DefaultReplicas    = 1
	DefaultDedupWindow = 2 * time.Minute
	// DefaultEventsDedupWindow is the events streams' dedup window: twice
	// a worker's default lease, past every re-send of an event (see
	// StreamOptions.EventsDedupWindow).
	DefaultEventsDedupWindow = 30 * time.Second
	DefaultEventsMaxAge      = 7 * 24 * time.Hour
	DefaultDLQMaxAge         = 30 * 24 * time.Hour
	DefaultFinishMaxAge      = 7 * 24 * time.Hour
)

// StreamOptions tunes the streams jetrun creates. Zero values mean the
// documented defaults. They apply only when a stream is created: an existing
// stream keeps whatever an operator set.
type StreamOptions struct {
	// Replicas of every stream and bucket (1 on a single server, 3 on a
	// cluster).
	Replicas int
	// DedupWindow of the dispatch stream: a dispatch re-published with the
	// same Nats-Msg-Id within it is stored once.
	DedupWindow time.Duration
	// EventsDedupWindow of the events streams: an event re-sent with the
	// same Nats-Msg-Id within it is stored once. Events are re-sent within
	// a fault only: a worker's publisher retries while its liveness holds
	// (its lease), a status announce for at most 10 s, and a repair reads
	// the stream before it writes; keep it above the workers' lease. The
	// server keeps every id for the window (about 125 bytes each): a fleet
	// streaming 16,000 events/s holds 60 MB of ids at 30 s, 250 MB at two
	// minutes, and each garbage collection of the server scans them.
	EventsDedupWindow time.Duration
	// EventsMaxAge is how long run events are kept for replay.
	EventsMaxAge time.Duration
	// DLQMaxAge is how long dead-lettered messages are kept.
	DLQMaxAge time.Duration
	// FinishMaxAge bounds how long a finish waits in the finish stream
	// for a deliverer. The reconciler publishes a lost or expired one
	// again while it is owed, and dead-letters a finish nobody takes.
	FinishMaxAge time.Duration
	// EventsStreams is how many streams hold run events, each run's events
	// in one of them chosen by a hash of its id, so a cluster spreads their
	// leaders and storage over its nodes (docs/operations.md, Spreading
	// events over nodes). It applies when the events streams are created;
	// zero takes the count of the streams that exist, or 1.
	EventsStreams int
}

// MaxEventsStreams bounds StreamOptions.EventsStreams.
const MaxEventsStreams = 64

// Validate reports every invalid option at once.
func (o StreamOptions) Validate() error {
	var errs []error
	if o.Replicas < 0 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas must be between 1 and 5, got %d", o.Replicas))
	}
	if o.DedupWindow < 0 || (o.DedupWindow > 0 && o.DedupWindow < 100*time.Millisecond) {
		errs = append(errs, fmt.Errorf("dedup window must be at least 100ms, got %s", o.DedupWindow))
	}
	if o.EventsDedupWindow < 0 || (o.EventsDedupWindow > 0 && o.EventsDedupWindow < 100*time.Millisecond) {
		errs = append(errs, fmt.Errorf("events dedup window must be at least 100ms, got %s", o.EventsDedupWindow))
	}
	if o.EventsMaxAge < 0 {
		errs = append(errs, fmt.Errorf("events max age must not be negative, got %s", o.EventsMaxAge))
	}
	if o.DLQMaxAge < 0 {
		errs = append(errs, fmt.Errorf("dead-letter max age must not be negative, got %s", o.DLQMaxAge))
	}
	if o.FinishMaxAge < 0 {
		errs = append(errs, fmt.Errorf("finish max age must not be negative, got %s", o.FinishMaxAge))
	}
	if o.EventsStreams < 0 || o.EventsStreams > MaxEventsStreams {
		errs = append(errs, fmt.Errorf("events streams must be between 1 and %d, got %d", MaxEventsStreams, o.EventsStreams))
	}
	return errors.Join(errs...)
}
