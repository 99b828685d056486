package wire

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// PublishCancel publishes the cancel event of run id without the attempt
// it is for: the worker checks it against the row. Writers that have the
// row publish model.Row.CancelEvent with PublishCancelEvent.
func PublishCancel(ctx context.Context, js jetstream.JetStream, ns Namespace, id, reason string) error {
	return PublishCancelEvent(ctx, js, ns, events.CancelEvent{RunID: id, Reason: reason, At: time.Now()})
}

// PublishCancelEvent publishes the cancel event ev on its run's cancel
// subject.
func PublishCancelEvent(ctx context.Context, js jetstream.JetStream, ns Namespace, ev events.CancelEvent) error {
	id := ev.RunID
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("events: encode cancel of run %s: %w", id, err)
	}
	subject, err := PublishSubject(ctx, js, ns, id, events.KindCancel)
	if err != nil {
		return fmt.Errorf("events: publish cancel of run %s: %w", id, err)
	}
	if _, err := js.Publish(ctx, subject, data); err != nil {
		return fmt.Errorf("events: publish cancel of run %s: %w", id, err)
	}
	return nil
}

// StreamConfigs returns the configurations of the streams jetrun needs.
func StreamConfigs(ns Namespace, o events.StreamOptions) []jetstream.StreamConfig {
	o = withDefaults(o)
	return append([]jetstream.StreamConfig{
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
			Duplicates:  min(events.DefaultDedupWindow, o.EventsMaxAge),
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
	}, eventsConfigs(ns, o)...)
}

// EnsureStreams creates the streams jetrun needs, or checks the ones that
// exist. RepairStreams is EnsureStreams for a stream found missing while
// jetrun runs. It never rewrites a stream an operator tuned: an existing stream
// keeps its limits, replicas and windows; only a missing jetrun subject is
// added. A stream whose retention policy differs is an error, because
// retention cannot be changed in place.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, ns Namespace, o events.StreamOptions) error {
	return ensureStreams(ctx, js, ns, o, 0)
}

// deletedSettle is how long RepairStreams waits before it creates a missing
// stream again. A file stream created while the server still removes the
// files of its deleted namesake comes back with the old state and never
// answers a publish (nats-server 2.12; TestDeletedDispatchStreamAndConsumersAreRecreated
// failed about one run in five without the wait).
const deletedSettle = time.Second

// RepairStreams creates the streams that are missing, as EnsureStreams
// does, after waiting deletedSettle for a stream just deleted to be gone.
func RepairStreams(ctx context.Context, js jetstream.JetStream, ns Namespace, o events.StreamOptions) error {
	return ensureStreams(ctx, js, ns, o, deletedSettle)
}

func ensureStreams(ctx context.Context, js jetstream.JetStream, ns Namespace, o events.StreamOptions, settle time.Duration) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("events: stream options: %w", err)
	}
	o, err := ResolveEventsStreams(ctx, js, ns, o)
	if err != nil {
		return err
	}
	created := false // an events stream
	for _, cfg := range StreamConfigs(ns, o) {
		made, err := ensureStream(ctx, js, cfg, settle)
		if err != nil {
			return err
		}
		created = created || made && cfg.Metadata[MetaEventsStreams] != ""
	}
	if created && o.Replicas > 1 {
		// Best effort: unbalanced leaders cost throughput, not correctness.
		bctx, cancel := context.WithTimeout(ctx, balanceTimeout)
		defer cancel()
		_ = BalanceEventsLeaders(bctx, js, ns, o.EventsStreams)
	}
	return nil
}

// balanceTimeout bounds the leader balancing after the events streams are
// created.
const balanceTimeout = 10 * time.Second

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, settle time.Duration) (created bool, err error) {
	if err := ensureStreamExists(ctx, js, want, settle, &created); err != nil {
		return false, err
	}
	return created, nil
}

func ensureStreamExists(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, settle time.Duration, created *bool) error {
	// Look first, create only what is missing: a user whose role may not
	// create streams (nats.conf: child, producer) starts against streams a
	// parent-worker created.
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) && settle > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("events: stream %s: %w", want.Name, ctx.Err())
		case <-time.After(settle):
		}
		s, err = js.Stream(ctx, want.Name) // another process may have created it
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateStream(ctx, want); err == nil {
			*created = true
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

// withDefaults fills the zero fields of o with the documented defaults.
func withDefaults(o events.StreamOptions) events.StreamOptions {
	o.Replicas = cmp.Or(o.Replicas, events.DefaultReplicas)
	o.DedupWindow = cmp.Or(o.DedupWindow, events.DefaultDedupWindow)
	o.EventsDedupWindow = cmp.Or(o.EventsDedupWindow, events.DefaultEventsDedupWindow)
	o.EventsMaxAge = cmp.Or(o.EventsMaxAge, events.DefaultEventsMaxAge)
	o.DLQMaxAge = cmp.Or(o.DLQMaxAge, events.DefaultDLQMaxAge)
	o.FinishMaxAge = cmp.Or(o.FinishMaxAge, events.DefaultFinishMaxAge)
	return o
}
