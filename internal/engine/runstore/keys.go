package runstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The state of concurrency keys (package keys says
// how runs move through it) is two kinds of entries in the active bucket:
//
//	keyholder.<key>         the id of the run holding the key
//	keyqueue.<key>.<runId>  one entry per run waiting for the key
//
// The queue's order is the order of its entries in the bucket's stream
// (their revisions). The holder entry changes only by compare-and-set
// (Keys.Take): that CAS is the key's lock.

// ErrKeyBusy is returned by a drop submit while a run of its key is live
// or queued; no row is left behind.
var ErrKeyBusy = jetruntype.ErrKeyBusy

const (
	keyHolderPrefix = "keyholder."
	keyQueuePrefix  = "keyqueue."
	// keyMarkerTTL is how long a queue entry's removal marker lives.
	keyMarkerTTL = time.Second
)

// Busy reports whether a run of key is live or queued.
func (s Keys) Busy(ctx context.Context, key string) (bool, error) {
	holder, _, err := s.Holder(ctx, key)
	if err != nil {
		return false, err
	}
	if holder != "" {
		h, _, err := s.rows().Get(ctx, holder)
		if err == nil && (h.Live() || h.Status == events.StatusQueued) {
			return true, nil
		}
		if err != nil && !errors.Is(err, ErrRunNotFound) {
			return false, err
		}
	}
	queue, err := s.Queue(ctx, key)
	if err != nil {
		return false, err
	}
	for _, e := range queue {
		r, _, err := s.rows().Get(ctx, e.ID)
		if err == nil && r.Status == events.StatusQueued {
			return true, nil
		}
		if err != nil && !errors.Is(err, ErrRunNotFound) {
			return false, err
		}
	}
	return false, nil
}

// EnsureQueued enters the queued run r in its key's queue unless it is
// there already.
func (s Keys) EnsureQueued(ctx context.Context, r *model.Row) error {
	if r.ConcurrencyKey == "" || r.Status != events.StatusQueued {
		return nil
	}
	_, err := s.Enqueue(ctx, r.ConcurrencyKey, r.ID)
	return err
}

// QueueEntry is a run waiting in a concurrency key's queue.
type QueueEntry struct {
	ID  string
	Rev uint64 // its position: the entry's revision in the bucket
}

// Enqueue enters run id in key's queue and returns its position; a run
// already queued keeps its position.
func (s Keys) Enqueue(ctx context.Context, key, id string) (uint64, error) {
	k := keyQueuePrefix + key + "." + id
	rev, err := s.active.Create(ctx, k, []byte(id))
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, gerr := s.active.Get(ctx, k)
		if gerr != nil {
			return 0, fmt.Errorf("kv: queue run %s under key %s: %w", id, key, gerr)
		}
		return e.Revision(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("kv: queue run %s under key %s: %w", id, key, err)
	}
	return rev, nil
}

// Dequeue drops run id's queue entry; a failure leaves it for a later
// advance of the key, which drops entries of runs no longer queued.
func (s Keys) Dequeue(ctx context.Context, key, id string) {
	_ = bucket.DeleteKey(ctx, s.js, s.active.Bucket(), keyQueuePrefix+key+"."+id, keyMarkerTTL)
}

// Holder returns the id of the run that holds key or held it last ("":
// none ever did), and the holder entry's revision (0: none), for Keys.Take.
func (s Keys) Holder(ctx context.Context, key string) (string, uint64, error) {
	e, err := s.active.Get(ctx, keyHolderPrefix+key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("kv: read holder of concurrency key %s: %w", key, err)
	}
	return string(e.Value()), e.Revision(), nil
}

// Take makes run id key's holder if the holder entry is still at rev
// (0: there is none). A lost compare-and-set returns ErrConflict.
func (s Keys) Take(ctx context.Context, key, id string, rev uint64) error {
	var err error
	if rev == 0 {
		_, err = s.active.Create(ctx, keyHolderPrefix+key, []byte(id))
	} else {
		_, err = s.active.Update(ctx, keyHolderPrefix+key, []byte(id), rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("kv: take concurrency key %s for run %s: %w", key, id, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("kv: take concurrency key %s for run %s: %w", key, id, err)
	}
	return nil
}

// Queue lists key's queue, oldest first. Entries of runs no longer
// queued may linger until the key is next advanced.
func (s Keys) Queue(ctx context.Context, key string) ([]QueueEntry, error) {
	prefix := keyQueuePrefix + key + "."
	w, err := s.active.Watch(ctx, prefix+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("kv: list queue of concurrency key %s: %w", key, err)
	}
	defer w.Stop()
	var out []QueueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kv: list queue of concurrency key %s: %w", key, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("kv: list queue of concurrency key %s: watcher closed", key)
			}
			if e == nil {
				slices.SortFunc(out, func(a, b QueueEntry) int { return cmp.Compare(a.Rev, b.Rev) })
				return out, nil
			}
			out = append(out, QueueEntry{ID: strings.TrimPrefix(e.Key(), prefix), Rev: e.Revision()})
		}
	}
}

// Withdraw removes a drop submit that lost its key: its row (still queued
// at rev; ErrConflict if it changed) and its queue entry.
func (s Keys) Withdraw(ctx context.Context, r *model.Row, rev uint64) error {
	err := bucket.DeleteKey(ctx, s.js, s.kv.Bucket(), r.ID, markerTTL, jetstream.WithExpectLastSequencePerSubject(rev))
	if wire.IsWrongLastSequence(err) {
		return fmt.Errorf("kv: withdraw run %s: %w", r.ID, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("kv: withdraw run %s: %w", r.ID, err)
	}
	s.Dequeue(ctx, r.ConcurrencyKey, r.ID)
	return Index(s).Unindex(ctx, r)
}
