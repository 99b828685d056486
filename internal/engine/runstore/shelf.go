package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

// The shelf lists the waiting runs whose dispatch a worker stopped
// heartbeating (docs/leases.md, "A waiting run costs nothing"): instead of
// an InProgress every third of a lease, the worker returned the dispatch
// with a long delay, once, so it stays pending on its consumer and comes
// back only when someone refuses it again. One entry per such run, in the
// active bucket:
//
//	shelf.<worker>.<id>    {epoch, attempt, reply}
//
// written once, before the dispatch is returned, and removed when the
// attempt ends. The entries of a live worker are never read: when a worker's
// liveness key lapses and the worker does not answer, or another
// incarnation holds its id, another worker lists its entries and refuses
// each dispatch at once through its acknowledgement subject (reply), so the
// server redelivers it and the run is taken over as after any lost worker.

const shelfPrefix = "shelf."

// shelfMarkerTTL is how long a shelf entry's removal marker lives.
const shelfMarkerTTL = time.Second

// Shelved is the shelf entry of a waiting run's attempt.
type Shelved struct {
	Worker  string `json:"-"`
	RunID   string `json:"-"`
	Epoch   string `json:"epoch"`
	Attempt int    `json:"attempt"`
	// Reply is the acknowledgement subject of the dispatch's delivery:
	// whoever publishes a refusal (-NAK) on it has it redelivered.
	Reply string `json:"reply"`
	// Revision is the entry's revision, as written or listed: a removal
	// names it, so it never removes a later attempt's entry.
	Revision uint64 `json:"-"`
}

// Shelf is the store of shelf entries (see Store.Shelf).
type Shelf struct{ *core }

// Shelf returns the store of waiting runs' shelf entries.
func (s *Store) Shelf() Shelf { return Shelf{s.core} }

func shelfKey(worker, id string) string { return shelfPrefix + worker + "." + id }

// Put writes entries, pipelined, and reports for each whether it is
// stored (nil; its Revision is set) or why not. ctx bounds the wait for
// the answers.
func (s Shelf) Put(ctx context.Context, entries []Shelved) []error {
	errs := make([]error, len(entries))
	acks := make([]jetstream.PubAckFuture, len(entries))
	for i, e := range entries {
		data, err := json.Marshal(e)
		if err != nil {
			errs[i] = fmt.Errorf("kv: encode shelf entry of run %s: %w", e.RunID, err)
			continue
		}
		if acks[i], err = s.js.PublishAsync(s.activeSubject(shelfKey(e.Worker, e.RunID)), data); err != nil {
			errs[i] = fmt.Errorf("kv: shelve run %s: %w", e.RunID, err)
		}
	}
	for i, a := range acks {
		if a == nil {
			continue
		}
		select {
		case ack := <-a.Ok():
			entries[i].Revision = ack.Sequence
		case err := <-a.Err():
			errs[i] = fmt.Errorf("kv: shelve run %s: %w", entries[i].RunID, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("kv: shelve run %s: %w", entries[i].RunID, ctx.Err())
		}
	}
	return errs
}

// Remove deletes the shelf entry e, unless the key holds a later entry
// (the run shelved again by a later attempt, by this worker or another
// incarnation of its id): a removal whose first try was late must not
// strand that one.
func (s Shelf) Remove(ctx context.Context, e Shelved) error {
	err := bucket.DeleteKey(ctx, s.js, s.active.Bucket(), shelfKey(e.Worker, e.RunID), shelfMarkerTTL,
		jetstream.WithExpectLastSequencePerSubject(e.Revision))
	if err != nil && !wire.IsWrongLastSequence(err) {
		return fmt.Errorf("kv: unshelve run %s: %w", e.RunID, err)
	}
	return nil
}

// List returns the shelf entries of worker, or of every worker when worker
// is empty. Its cost grows with the entries listed: it is read when a
// worker is lost and when a worker starts, never while runs wait.
func (s Shelf) List(ctx context.Context, worker string) ([]Shelved, error) {
	filter := shelfPrefix + ">"
	if worker != "" {
		filter = shelfPrefix + worker + ".>"
	}
	w, err := s.active.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("kv: list shelf entries: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Shelved
	for e := range updates(ctx, w) {
		if e == nil {
			return out, nil
		}
		rest := strings.TrimPrefix(e.Key(), shelfPrefix)
		worker, id, ok := strings.Cut(rest, ".")
		if !ok {
			continue
		}
		v := Shelved{Worker: worker, RunID: id, Revision: e.Revision()}
		if json.Unmarshal(e.Value(), &v) != nil {
			continue // not an entry this version wrote: left alone
		}
		out = append(out, v)
	}
	return nil, fmt.Errorf("kv: list shelf entries: %w", errors.Join(ctx.Err(), errors.New("watch ended")))
}
