package kv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// The active-run index lives in its own bucket (jetrun_active), so work that
// concerns live runs (the reconciler's sweep, cancel cascades, per-parent
// caps) costs in proportion to live runs, never to the rows retained:
//
//	run.<id>               one entry per run that is not settled yet
//	child.<parent>.<id>    one entry per unsettled run that has a parent
//
// Entries are created before the row (Create) and removed once the run is
// settled (Unindex) with a subject purge of the bucket's stream, which leaves
// no delete marker behind: listing the index never walks tombstones.

const (
	indexRunPrefix   = "run."
	indexChildPrefix = "child."
)

func (s *Store) index(ctx context.Context, r *Run) error {
	val := []byte(r.AgentType)
	keys := []string{indexRunPrefix + r.ID}
	if r.Parent != "" {
		keys = append(keys, indexChildPrefix+r.Parent+"."+r.ID)
	}
	for _, k := range keys {
		if _, err := s.active.Create(ctx, k, val); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("kv: index run %s: %w", r.ID, err)
		}
	}
	return nil
}

// Unindex removes r's index entries; call it once r is settled.
func (s *Store) Unindex(ctx context.Context, r *Run) error {
	subjects := []string{s.activeSubject(indexRunPrefix + r.ID)}
	if r.Parent != "" {
		subjects = append(subjects, s.activeSubject(indexChildPrefix+r.Parent+"."+r.ID))
	}
	for _, subj := range subjects {
		if err := s.activeKV.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("kv: unindex run %s: %w", r.ID, err)
		}
	}
	return nil
}

// UnindexID removes the index entry of a run whose row is gone.
func (s *Store) UnindexID(ctx context.Context, id string) error {
	if err := s.activeKV.Purge(ctx, jetstream.WithPurgeSubject(s.activeSubject(indexRunPrefix+id))); err != nil {
		return fmt.Errorf("kv: unindex run %s: %w", id, err)
	}
	return nil
}

func (s *Store) activeSubject(key string) string { return "$KV." + s.active.Bucket() + "." + key }

// IndexedRun is an entry of the active-run index.
type IndexedRun struct {
	ID        string
	CreatedAt time.Time // when the entry was made
}

// Active lists the runs in the active-run index: every run not settled yet.
func (s *Store) Active(ctx context.Context) ([]IndexedRun, error) {
	return s.listIndex(ctx, indexRunPrefix)
}

// Children lists the unsettled runs whose parent is parent.
func (s *Store) Children(ctx context.Context, parent string) ([]IndexedRun, error) {
	return s.listIndex(ctx, indexChildPrefix+parent+".")
}

func (s *Store) listIndex(ctx context.Context, prefix string) ([]IndexedRun, error) {
	w, err := s.active.Watch(ctx, prefix+">", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("kv: list index %s: %w", prefix, err)
	}
	defer w.Stop()
	var out []IndexedRun
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kv: list index %s: %w", prefix, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("kv: list index %s: watcher closed", prefix)
			}
			if e == nil {
				return out, nil
			}
			id := strings.TrimPrefix(e.Key(), prefix)
			ir := IndexedRun{ID: id, CreatedAt: e.Created()}
			out = append(out, ir)
		}
	}
}

// ActiveBucket returns the bucket of the active-run index, which also holds
// per-parent concurrency slots (slot.*) and the reconciler's lease (leader).
func (s *Store) ActiveBucket() jetstream.KeyValue { return s.active }

// Erase removes every trace of a run: its events (a subject purge of the
// events stream), its row, its index entries and the concurrency slots it
// held as a parent. Callers erase only runs that are no longer live.
func (s *Store) Erase(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *Run) error {
	stream, err := js.Stream(ctx, ns.EventsStream())
	if err != nil {
		return fmt.Errorf("kv: erase run %s: bind events stream: %w", r.ID, err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(ns.RunWildcard(r.ID))); err != nil {
		return fmt.Errorf("kv: erase events of run %s: %w", r.ID, err)
	}
	if err := s.activeKV.Purge(ctx, jetstream.WithPurgeSubject(s.activeSubject(SlotPrefix(r.ID)+">"))); err != nil {
		return fmt.Errorf("kv: erase slots of run %s: %w", r.ID, err)
	}
	return s.Delete(ctx, r)
}

// SlotPrefix is the key prefix of the concurrency slots of runs whose parent
// is parent: slot.<parent>.<n>.
func SlotPrefix(parent string) string { return "slot." + parent + "." }
