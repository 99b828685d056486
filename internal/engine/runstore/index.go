package runstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
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
// settled (Unindex) with a delete marker that expires after a second: a
// watcher sees the removal, and markers never pile up. The reconciler
// follows the index with a watch (Index.Watch) rather than listing it each
// sweep, because listing a stream costs in proportion to the entries removed
// since its oldest live one, not only to the live ones.

// indexMarkerTTL is how long an index removal's marker lives.
const indexMarkerTTL = time.Second

const (
	indexRunPrefix   = "run."
	indexChildPrefix = "child."
)

// indexKeys are r's keys in the index: the run's own, and its entry under
// its parent.
func indexKeys(r *model.Row) []string {
	keys := []string{indexRunPrefix + r.ID}
	if r.Parent != "" {
		keys = append(keys, indexChildPrefix+r.Parent+"."+r.ID)
	}
	return keys
}

func (s *core) index(ctx context.Context, r *model.Row) error {
	val := []byte(r.AgentType)
	for _, k := range indexKeys(r) {
		if _, err := s.active.Create(ctx, k, val); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("kv: index run %s: %w", r.ID, err)
		}
	}
	return nil
}

// Reindex enters r, a run given up that is being resumed, in the index
// again (its entries went when its give-up settled). A resume calls it
// before and after the row's transition: before, so a resumer that dies
// after the transition leaves an entry; after, so an entry purged meanwhile
// by someone who read the row settled comes back (see Unindex).
func (s Index) Reindex(ctx context.Context, r *model.Row) error {
	if r.Unindexed {
		return nil
	}
	return s.index(ctx, r)
}

// Unindex removes r's index entries; call it once r is settled. A run
// given up (interrupted) may be resumed meanwhile: its resumer writes the
// entries again (Reindex) after moving the row, so the purge here may come
// just after them. For such a run the row is read again after the purge,
// and a run found live is entered again. A final run is never resumed: it
// costs no read.
func (s Index) Unindex(ctx context.Context, r *model.Row) error {
	if err := s.purgeIndex(ctx, r); err != nil {
		return err
	}
	if r.Status != events.StatusInterrupted {
		return nil
	}
	now, _, err := s.rows().Get(ctx, r.ID)
	if errors.Is(err, ErrRunNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kv: unindex run %s: check for a resume: %w", r.ID, err)
	}
	if now.Settled() {
		return nil
	}
	return s.Reindex(ctx, now)
}

func (s *core) purgeIndex(ctx context.Context, r *model.Row) error {
	for _, k := range indexKeys(r) {
		if err := bucket.DeleteKey(ctx, s.js, s.active.Bucket(), k, indexMarkerTTL); err != nil {
			return fmt.Errorf("kv: unindex run %s: %w", r.ID, err)
		}
	}
	return nil
}

// UnindexIfSettled removes r's index entries if r is settled (nil is
// ignored). The reconciler removes settled runs too; doing it at once spares
// it the look.
func (s Index) UnindexIfSettled(ctx context.Context, r *model.Row) error {
	if r == nil || r.Unindexed || !r.Settled() {
		return nil
	}
	return s.Unindex(ctx, r)
}

// UnindexID removes the index entry of a run whose row is gone.
func (s Index) UnindexID(ctx context.Context, id string) error {
	if err := bucket.DeleteKey(ctx, s.js, s.active.Bucket(), indexRunPrefix+id, indexMarkerTTL); err != nil {
		return fmt.Errorf("kv: unindex run %s: %w", id, err)
	}
	return nil
}

func (s *core) activeSubject(key string) string { return wire.BucketSubject(s.active.Bucket(), key) }

// IndexedRun is an entry of the active-run index.
type IndexedRun struct {
	ID        string
	CreatedAt time.Time // when the entry was made
}

// Active lists the runs in the active-run index: every run not settled yet.
func (s Index) Active(ctx context.Context) ([]IndexedRun, error) {
	return s.listIndex(ctx, indexRunPrefix)
}

// Children lists the unsettled runs whose parent is parent.
func (s Index) Children(ctx context.Context, parent string) ([]IndexedRun, error) {
	return s.listIndex(ctx, indexChildPrefix+parent+".")
}

func (s *core) listIndex(ctx context.Context, prefix string) ([]IndexedRun, error) {
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

// clearedTTL is how long a cleared run's tombstone stops a dispatch that
// lingered in the queue from re-creating it.
const clearedTTL = 24 * time.Hour

const clearedPrefix = "cleared."

// Tombstone records that run id was erased when the dispatch stream's last
// sequence was mark, for 24 h: a copy of its old dispatch still around
// cannot bring the run back (Cleared), while a new dispatch of the same id,
// published later, starts it afresh. engine.Runtime.Erase writes it first.
func (s Index) Tombstone(ctx context.Context, id string, mark uint64) error {
	data := []byte(strconv.FormatUint(mark, 10))
	if _, err := s.js.Publish(ctx, s.activeSubject(clearedPrefix+id), data, jetstream.WithMsgTTL(clearedTTL)); err != nil {
		return fmt.Errorf("kv: erase run %s: tombstone: %w", id, err)
	}
	return nil
}

// Erase removes a run's records from the buckets: the concurrency slots it
// held as a parent, then its row. engine.Runtime.Erase calls it last, after
// the run's messages are gone.
func (s *Store) Erase(ctx context.Context, r *model.Row) error {
	if err := s.activeKV.Purge(ctx, jetstream.WithPurgeSubject(s.activeSubject(slotPrefix(r.ID)+">"))); err != nil {
		return fmt.Errorf("kv: erase slots of run %s: %w", r.ID, err)
	}
	return s.Delete(ctx, r)
}

// ActiveWatch follows the active-run index in memory: its reader pays for
// the changes as they happen, and a snapshot costs nothing on the server.
type ActiveWatch struct {
	mu     sync.Mutex
	runs   map[string]time.Time
	ready  chan struct{}
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

// Watch starts following the active-run index and returns once the
// initial state is loaded; ctx bounds that load only. The watch runs until
// Stop. A broken watch is re-created, reloading the whole index.
func (s Index) Watch(ctx context.Context) (*ActiveWatch, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	aw := &ActiveWatch{runs: make(map[string]time.Time), ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go aw.loop(wctx, s.core)
	select {
	case <-aw.ready:
		if aw.err != nil { // written before ready was closed
			aw.Stop()
			return nil, aw.err
		}
		return aw, nil
	case <-ctx.Done():
		aw.Stop()
		return nil, fmt.Errorf("kv: load the active-run index: %w", ctx.Err())
	}
}

// rewatchPause is the longest pause before a watch that failed, or
// closed, is created again; the pauses grow from jsfault.InitialInterval
// while the watch keeps failing.
const rewatchPause = 5 * time.Second

func (aw *ActiveWatch) loop(ctx context.Context, s *core) {
	defer close(aw.done)
	first := true
	bo := jsfault.NewBackOff(rewatchPause) // reset by a watch that loads
	for ctx.Err() == nil {
		w, err := s.active.Watch(ctx, indexRunPrefix+">")
		if err != nil {
			if first {
				aw.err = fmt.Errorf("kv: watch the active-run index: %w", err)
				close(aw.ready)
				return
			}
			_ = jsfault.Sleep(ctx, bo.NextBackOff())
			continue
		}
		// A (re)load fills fresh, which replaces the snapshot once complete
		// and then takes the changes that follow.
		fresh := make(map[string]time.Time)
		for e := range updates(ctx, w) {
			aw.mu.Lock()
			if e == nil { // the initial state is complete
				aw.runs = fresh
			} else if id := strings.TrimPrefix(e.Key(), indexRunPrefix); e.Operation() == jetstream.KeyValuePut {
				fresh[id] = e.Created()
			} else {
				delete(fresh, id)
			}
			aw.mu.Unlock()
			if e == nil {
				bo.Reset()
			}
			if e == nil && first {
				first = false
				close(aw.ready)
			}
		}
		_ = w.Stop() // the channel closed: re-create the watch, after a pause
		_ = jsfault.Sleep(ctx, bo.NextBackOff())
	}
	if first {
		aw.err = ctx.Err()
		close(aw.ready)
	}
}

// Snapshot returns the runs currently in the index.
func (aw *ActiveWatch) Snapshot() []IndexedRun {
	aw.mu.Lock()
	defer aw.mu.Unlock()
	out := make([]IndexedRun, 0, len(aw.runs))
	for id, at := range aw.runs {
		out = append(out, IndexedRun{ID: id, CreatedAt: at})
	}
	return out
}

// Forget drops id from the snapshot at once, for a run its reader just
// removed from the index.
func (aw *ActiveWatch) Forget(id string) {
	aw.mu.Lock()
	delete(aw.runs, id)
	aw.mu.Unlock()
}

// Stop ends the watch and waits for its goroutine. It is idempotent.
func (aw *ActiveWatch) Stop() {
	aw.cancel()
	<-aw.done
}

// Cleared reports whether the dispatch at sequence seq of run id belongs
// to an incarnation of the run that was erased: it was published before
// the erase, so it must not re-create the run.
func (s Index) Cleared(ctx context.Context, id string, seq uint64) (bool, error) {
	e, err := s.active.Get(ctx, clearedPrefix+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kv: look up tombstone of run %s: %w", id, err)
	}
	mark, err := strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return true, nil // a tombstone we cannot read: be safe
	}
	return seq <= mark, nil
}
