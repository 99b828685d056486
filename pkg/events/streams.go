package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream defaults, used where StreamOptions leaves a field zero.
const (
	DefaultReplicas     = 1
	DefaultDedupWindow  = 2 * time.Minute
	DefaultEventsMaxAge = 7 * 24 * time.Hour
	DefaultDLQMaxAge    = 30 * 24 * time.Hour
	DefaultFinishMaxAge = 7 * 24 * time.Hour
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
	// EventsMaxAge is how long run events are kept for replay.
	EventsMaxAge time.Duration
	// DLQMaxAge is how long dead-lettered messages are kept.
	DLQMaxAge time.Duration
	// FinishMaxAge bounds how long a finish waits in the finish stream
	// for a deliverer. The reconciler publishes a lost or expired one
	// again while it is owed, and dead-letters a finish nobody takes.
	FinishMaxAge time.Duration
}

func (o StreamOptions) withDefaults() StreamOptions {
	o.Replicas = cmp.Or(o.Replicas, DefaultReplicas)
	o.DedupWindow = cmp.Or(o.DedupWindow, DefaultDedupWindow)
	o.EventsMaxAge = cmp.Or(o.EventsMaxAge, DefaultEventsMaxAge)
	o.DLQMaxAge = cmp.Or(o.DLQMaxAge, DefaultDLQMaxAge)
	o.FinishMaxAge = cmp.Or(o.FinishMaxAge, DefaultFinishMaxAge)
	return o
}

// Validate reports every invalid option at once.
func (o StreamOptions) Validate() error {
	var errs []error
	if o.Replicas < 0 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas must be between 1 and 5, got %d", o.Replicas))
	}
	if o.DedupWindow < 0 || (o.DedupWindow > 0 && o.DedupWindow < 100*time.Millisecond) {
		errs = append(errs, fmt.Errorf("dedup window must be at least 100ms, got %s", o.DedupWindow))
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
	return errors.Join(errs...)
}

// StreamConfigs returns the configurations of the streams jetrun needs.
func StreamConfigs(ns Namespace, o StreamOptions) []jetstream.StreamConfig {
	o = o.withDefaults()
	return []jetstream.StreamConfig{
		{
			Name:        ns.DispatchStream(),
			Description: "jetrun dispatches: one message per run, removed once a worker finishes it",
			Subjects:    []string{ns.DispatchWildcard()},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
			Duplicates:  o.DedupWindow,
			Discard:     jetstream.DiscardNew,
			AllowDirect: true, // lets `nats stream view` page a work queue
		},
		{
			Name:        ns.EventsStream(),
			Description: "jetrun run events: status, chunks, progress and milestones, kept for replay",
			Subjects:    []string{ns.RunsWildcard()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
			MaxAge:      o.EventsMaxAge,
			Duplicates:  min(DefaultDedupWindow, o.EventsMaxAge),
			AllowDirect: true,
		},
		{
			Name:        ns.FinishStream(),
			Description: "jetrun finish deliveries: one message per detached run and status, removed once delivered",
			Subjects:    []string{ns.FinishWildcard()},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
			MaxAge:      o.FinishMaxAge,
			Duplicates:  min(o.DedupWindow, o.FinishMaxAge),
			AllowDirect: true,
		},
		{
			Name:        ns.SignalsStream(),
			Description: "jetrun signals: payloads sent to runs waiting for a human or an outside event",
			Subjects:    []string{ns.SignalsWildcard()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
			MaxAge:      o.EventsMaxAge,
			Duplicates:  min(DefaultDedupWindow, o.EventsMaxAge),
			AllowDirect: true,
		},
		{
			Name:        ns.DLQStream(),
			Description: "jetrun dead letters: rejected messages with the original payload and a Jetrun-Reason header",
			Subjects:    []string{ns.DLQWildcard()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
			MaxAge:      o.DLQMaxAge,
			AllowDirect: true,
		},
	}
}

// EnsureStreams creates the streams jetrun needs, or checks the ones that
// exist. It never rewrites a stream an operator tuned: an existing stream
// keeps its limits, replicas and windows; only a missing jetrun subject is
// added. A stream whose retention policy differs is an error, because
// retention cannot be changed in place.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, ns Namespace, o StreamOptions) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("events: stream options: %w", err)
	}
	for _, cfg := range StreamConfigs(ns, o) {
		if err := ensureStream(ctx, js, cfg); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	// Look first, create only what is missing: a user whose role may not
	// create streams (nats.conf: child, producer) starts against streams a
	// parent-worker created.
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateStream(ctx, want); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("events: create stream %s (a user that may not create streams gets a timeout here: "+
				"start a parent-worker first; docs/operations.md, Authentication): %w", want.Name, err)
		}
		s, err = js.Stream(ctx, want.Name) // another process won the race
	}
	if err != nil {
		return fmt.Errorf("events: look up stream %s: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	if have.Retention != want.Retention {
		return fmt.Errorf("events: stream %s exists with %s retention; jetrun needs %s (delete or rename it)",
			want.Name, have.Retention, want.Retention)
	}
	var missing []string
	for _, subj := range want.Subjects {
		if !slices.Contains(have.Subjects, subj) {
			missing = append(missing, subj)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	have.Subjects = append(have.Subjects, missing...)
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return fmt.Errorf("events: add subjects %v to stream %s: %w", missing, want.Name, err)
	}
	return nil
}
