package runstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/jspub"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Errors returned by Store methods; test with errors.Is.
var (
	// ErrRunNotFound is returned by Get and Mutate when no row exists for the
	// id (Update of a missing row is ErrConflict: its revision is gone). It
	// is the public jetruntype.ErrRunNotFound (parent.ErrRunNotFound).
	ErrRunNotFound = jetruntype.ErrRunNotFound
	// ErrRunExists is returned by Create when a row already exists.
	ErrRunExists = errors.New("run already exists")
	// ErrConflict is returned by Update when the row changed since the
	// revision the caller read (a lost compare-and-set).
	ErrConflict = errors.New("run row changed concurrently")
	// ErrNoChange may be returned by a Mutate function to leave the row as it
	// is; Mutate then returns the current row and a nil error.
	ErrNoChange = model.ErrNoChange
	// ErrCorruptRow is returned when a stored row is not valid JSON.
	ErrCorruptRow = errors.New("corrupt run row")
	// ErrNoTrace marks a miss of Lookup (ErrRunNotFound too) where the
	// row's key holds no message at all: not even the marker a removal
	// leaves for markerTTL (see MissProvesUncleared).
	ErrNoTrace = errors.New("no row and no removal marker")
	// ErrFinal is returned by Mutate and MutateFrom when fn would move a
	// row out of its final status (completed, error, aborted): a final
	// status is never left. Only RewriteFinal may change it.
	ErrFinal = errors.New("a final status is never left")
)

// Config configures a Store. Zero values mean defaults.
type Config struct {
	// Namespace names the bucket (default "jetrun" → bucket "jetrun_runs").
	Namespace wire.Namespace
	// Replicas of the bucket when it is created (default 1).
	Replicas int
	// MaxRetry bounds how long Mutate keeps retrying transient faults
	// (default 10s); lost compare-and-sets are retried until they win.
	MaxRetry time.Duration
	// Publisher carries the rows' writes and reads (nil: the store
	// subscribes one of its own on js's connection).
	Publisher *jspub.Publisher
}

// DefaultMaxRetry bounds Mutate's retries of transient faults when
// Config.MaxRetry is zero.
const DefaultMaxRetry = 10 * time.Second

// maxConflicts bounds Mutate's retries of lost compare-and-sets. Each one
// means another writer succeeded, so they end; the bound is a backstop.
const maxConflicts = 10_000

// Store reads and writes run rows. Every write is a compare-and-set on the
// row's revision, so concurrent writers never lose each other's updates and a
// final status is never rewritten. A Store is safe for concurrent use. The
// other records of the runs are small stores of their own on the same
// buckets: the active-run index (Index), concurrency keys (Keys) and the
// workers' liveness (Workers).
type Store struct{ *core }

// Index returns the store of the active-run index.
func (s *Store) Index() Index { return Index{s.core} }

// Keys returns the store of concurrency keys' holders and queues.
func (s *Store) Keys() Keys { return Keys{s.core} }

// Workers returns the store of the workers' liveness keys.
func (s *Store) Workers() Workers { return Workers{s.core} }

// Index is the active-run index: an entry per run that may still need the
// reconciler, and one per run under its parent (index.go).
type Index struct{ *core }

// Keys is the state of concurrency keys: each key's holder and queue
// (keys.go; package keys holds the protocol).
type Keys struct{ *core }

// Workers is the workers' liveness keys: who is alive, with which epoch
// (liveness.go).
type Workers struct{ *core }

// core is what the stores share: the buckets and their settings.
type core struct {
	js       jetstream.JetStream
	pub      *jspub.Publisher // the rows' writes and reads
	direct   bool             // the runs bucket answers direct gets (buckets made by nats.go's CreateKeyValue do)
	kv       jetstream.KeyValue
	active   jetstream.KeyValue // the active-run index, see index.go
	activeKV jetstream.Stream   // the active bucket's stream, for marker-free removals
	maxRetry time.Duration
	replicas int // of the runs bucket; more than one: a miss is confirmed with the leader (leader.go)
	// noBatchReadUntil (unix nanoseconds) is set when a batched read
	// failed (a server without them, a user not allowed them, whose request
	// the server drops): LookupMany does not try again before then.
	noBatchReadUntil atomic.Int64
}

// markerTTL is how long the marker a cleared row leaves behind lives.
const markerTTL = time.Minute

// Open binds the runs bucket and the active-run index bucket, creating them
// when they do not exist. Existing buckets are used as they are.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	replicas := cmp.Or(cfg.Replicas, 1)
	runs, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Namespace.RunsBucket(),
		Description: "jetrun run rows: one per run, key = run id",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, err
	}
	active, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Namespace.ActiveBucket(),
		Description: "jetrun active-run index (run.<id>, child.<parent>.<id>), concurrency slots, reconciler lease",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, err
	}
	activeKV, err := js.Stream(ctx, wire.BucketStream(cfg.Namespace.ActiveBucket()))
	if err != nil {
		return nil, fmt.Errorf("kv: bind the stream of bucket %s: %w", cfg.Namespace.ActiveBucket(), err)
	}
	status, err := runs.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("kv: status of bucket %s: %w", cfg.Namespace.RunsBucket(), err)
	}
	pub := cfg.Publisher
	if pub == nil {
		if pub, err = jspub.New(js); err != nil {
			return nil, fmt.Errorf("kv: %w", err)
		}
	}
	return &Store{&core{
		js: js, pub: pub, direct: bucketDirect(status), kv: runs, active: active, activeKV: activeKV, maxRetry: cmp.Or(cfg.MaxRetry, DefaultMaxRetry),
		replicas: bucketReplicas(status),
	}}, nil
}

// bucketDirect reports whether the stream behind a bucket answers direct
// gets.
func bucketDirect(st jetstream.KeyValueStatus) bool {
	kvs, ok := st.(*jetstream.KeyValueBucketStatus)
	return ok && kvs.StreamInfo() != nil && kvs.StreamInfo().Config.AllowDirect
}

// bucketReplicas returns the replicas of the stream behind a bucket.
func bucketReplicas(st jetstream.KeyValueStatus) int {
	if kvs, ok := st.(*jetstream.KeyValueBucketStatus); ok && kvs.StreamInfo() != nil {
		return kvs.StreamInfo().Config.Replicas
	}
	return 1
}

// openRetry bounds how long Open retries a transient failure to open or
// create a bucket: on a busy cluster, placing a replicated bucket can
// outlast one request's timeout, and the bucket is there a moment later
// (a retry then finds it).
const openRetry = 30 * time.Second

// openBucket binds bucket cfg, creating it when it does not exist; a
// bucket it creates refuses roll-ups (bucket.Harden). An existing
// bucket is used as it is: Harden migrates one an earlier jetrun created.
// Transient failures are retried for up to openRetry.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := jsfault.Retry(ctx, openRetry, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(ctx, cfg.Bucket) // another process won the race
			}
			if err == nil {
				_, err = bucket.Harden(ctx, js, cfg.Bucket)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kv: open bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Harden makes the runs and active buckets refuse roll-ups if they do not
// yet (buckets an earlier jetrun created), and returns the names of those
// it changed. It needs the permission to update streams: parent-worker
// calls it at start.
func (s *Store) Harden(ctx context.Context) ([]string, error) {
	var changed []string
	for _, b := range []string{s.kv.Bucket(), s.active.Bucket()} {
		ok, err := bucket.Harden(ctx, s.js, b)
		if err != nil {
			return changed, fmt.Errorf("kv: %w", err)
		}
		if ok {
			changed = append(changed, b)
		}
	}
	return changed, nil
}

// Get returns the row of run id and its revision, or ErrRunNotFound.
func (s *Store) Get(ctx context.Context, id string) (*model.Row, uint64, error) {
	r, rev, err := s.Lookup(ctx, id)
	if errors.Is(err, ErrRunNotFound) {
		return s.confirmMissing(ctx, id)
	}
	return r, rev, err
}

// Lookup is Get without asking the leader about a miss (see leader.go): a
// replica that is behind may answer ErrRunNotFound for a row that exists.
// It is for a read whose miss is followed by a Create, whose
// compare-and-set catches such a row, so the common miss costs one round
// trip.
func (s *Store) Lookup(ctx context.Context, id string) (*model.Row, uint64, error) {
	if err := events.ValidateID(id); err != nil {
		return nil, 0, fmt.Errorf("kv: get run: %w", err)
	}
	data, rev, err := s.read(ctx, id)
	if errors.Is(err, errNoMessage) {
		return nil, 0, fmt.Errorf("kv: get run %s: %w (%w)", id, ErrRunNotFound, ErrNoTrace)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("kv: get run %s: %w", id, ErrRunNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("kv: get run %s: %w", id, err)
	}
	r, err := Decode(id, data)
	if err != nil {
		return nil, 0, err
	}
	return r, rev, nil
}

// read returns the value and revision of run id's row, as
// jetstream.KeyValue.Get does (a key deleted or purged, or expired, is
// jetstream.ErrKeyNotFound), by direct get through the store's publisher:
// the read every dispatch starts with.
func (s *Store) read(ctx context.Context, id string) ([]byte, uint64, error) {
	if !s.direct {
		e, err := s.kv.Get(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		return e.Value(), e.Revision(), nil
	}
	return readAnswer(s.pub.Request(ctx, s.readMsg(id)))
}

// readMsg is the direct get of run id's row (s.direct).
func (s *Store) readMsg(id string) *nats.Msg {
	bucket := s.kv.Bucket()
	return nats.NewMsg("$JS.API.DIRECT.GET." + wire.BucketStream(bucket) + "." + wire.BucketSubject(bucket, id))
}

// errNoMessage is a direct get's answer that the key has no message at
// all (jetstream.ErrKeyNotFound too): no row, and no marker of a removal.
var errNoMessage = fmt.Errorf("%w: no message", jetstream.ErrKeyNotFound)

// MissProvesUncleared reports whether a Lookup that misses with
// ErrNoTrace proves that the run was not cleared after a dispatch the
// server stored at stored was published, so the dispatch's tombstone
// (Index.Cleared) need not be read. Such a tombstone would be an erase's
// after that dispatch (its mark is the dispatch stream's last sequence
// then), and an erase writes its tombstone first and then removes the
// row, leaving a deletion marker that lives markerTTL from then: a
// dispatch younger than half of that (by this process's clock, so half a
// minute allows for the two clocks' skew) finds that marker instead of
// nothing, and reads the tombstone. Only a bucket of one replica answers:
// a replica that is behind could miss the marker.
func (s *Store) MissProvesUncleared(stored time.Time) bool {
	return s.direct && s.replicas <= 1 && !stored.IsZero() && time.Since(stored) < markerTTL/2
}

// readAnswer reads a direct get's answer as read returns it.
func readAnswer(resp *nats.Msg, err error) ([]byte, uint64, error) {
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Data) == 0 {
		switch status := resp.Header.Get("Status"); status {
		case "404":
			return nil, 0, errNoMessage
		case "":
		default:
			return nil, 0, fmt.Errorf("direct get: %s %s", status, resp.Header.Get("Description"))
		}
	}
	if isMarker(resp.Header) {
		return nil, 0, jetstream.ErrKeyNotFound
	}
	rev, err := strconv.ParseUint(resp.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("direct get: bad %s header: %w", jetstream.SequenceHeader, err)
	}
	return resp.Data, rev, nil
}

// Create stores a new row and returns its revision, or ErrRunExists. Unless
// r.Unindexed, the run is entered in the active-run index first, so such a
// row that is not settled always has an index entry (an entry without a
// row, left by a crash, is removed by the reconciler).
func (s *Store) Create(ctx context.Context, r *model.Row) (uint64, error) {
	if err := events.ValidateID(r.ID); err != nil {
		return 0, fmt.Errorf("kv: create run: %w", err)
	}
	data, err := model.EncodeRow(r)
	if err != nil {
		return 0, fmt.Errorf("kv: encode run %s: %w", r.ID, err)
	}
	if !r.Unindexed {
		if err := s.index(ctx, r); err != nil {
			return 0, err
		}
	}
	rev, err := s.write(ctx, r.ID, data, 0)
	if wire.IsWrongLastSequence(err) {
		return s.createOver(ctx, r.ID, data)
	}
	if err != nil {
		return 0, fmt.Errorf("kv: create run %s: %w", r.ID, err)
	}
	return rev, nil
}

// write publishes data as the row of run id if the row's last revision is
// still rev (0: the key has no message), as jetstream.KeyValue.Update
// does, with the answer read by jspub: these are the hottest writes there
// are. A lost compare-and-set is wire.IsWrongLastSequence.
func (s *Store) write(ctx context.Context, id string, data []byte, rev uint64) (uint64, error) {
	m := &nats.Msg{Subject: wire.BucketSubject(s.kv.Bucket(), id), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	ack, err := s.pub.Publish(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Delete removes the row of run id and its index entries. Watchers see a
// deletion; the marker it leaves expires after a minute.
func (s *Store) Delete(ctx context.Context, r *model.Row) error {
	if err := bucket.DeleteKey(ctx, s.js, s.kv.Bucket(), r.ID, markerTTL); err != nil {
		return fmt.Errorf("kv: delete run %s: %w", r.ID, err)
	}
	return s.purgeIndex(ctx, r)
}

// Update writes r if the stored row is still at revision rev, and returns the
// new revision. It returns ErrConflict if the row changed meanwhile.
func (s *Store) Update(ctx context.Context, r *model.Row, rev uint64) (uint64, error) {
	if err := events.ValidateID(r.ID); err != nil {
		return 0, fmt.Errorf("kv: update run: %w", err)
	}
	data, err := model.EncodeRow(r)
	if err != nil {
		return 0, fmt.Errorf("kv: encode run %s: %w", r.ID, err)
	}
	newRev, err := s.write(ctx, r.ID, data, rev)
	if wire.IsWrongLastSequence(err) {
		return 0, fmt.Errorf("kv: update run %s at revision %d: %w", r.ID, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("kv: update run %s: %w", r.ID, err)
	}
	return newRev, nil
}

// Mutate applies fn to the current row of run id and writes the result with a
// compare-and-set, re-reading and re-applying fn after every lost race, until
// it succeeds, fn returns an error, or the retry budget runs out.
//
// fn receives a private copy it may change. It must be idempotent: when a
// write lands but its acknowledgement is lost, fn is applied again to the row
// that already carries its change. Returning ErrNoChange leaves the row
// untouched and makes Mutate return the current row with a nil error; any
// other error is returned as is. A result that changes a final row's status
// is not written: Mutate returns ErrFinal.
func (s *Store) Mutate(ctx context.Context, id string, fn func(*model.Row) error) (*model.Row, uint64, error) {
	return s.mutate(ctx, id, keepFinal(fn))
}

// RewriteFinal is Mutate for the one write that may change a final row's
// status: the repair of a row someone rewrote without the compare-and-set,
// back to the run's real ending (engine.Runtime.RepairFinal).
func (s *Store) RewriteFinal(ctx context.Context, id string, fn func(*model.Row) error) (*model.Row, uint64, error) {
	return s.mutate(ctx, id, func(_, next *model.Row) error { return fn(next) })
}

// keepFinal wraps a Mutate function so that a result that leaves (or
// changes) a final status is refused with ErrFinal: the one place the
// store keeps final statuses final.
func keepFinal(fn func(*model.Row) error) func(was, next *model.Row) error {
	return func(was, next *model.Row) error {
		if err := fn(next); err != nil {
			return err
		}
		if was.Status.Final() && next.Status != was.Status {
			return fmt.Errorf("kv: run %s: %s → %s: %w", was.ID, was.Status, next.Status, ErrFinal)
		}
		return nil
	}
}

// mutate is Mutate, with fn given the row it changes (was) beside its copy.
func (s *Store) mutate(ctx context.Context, id string, fn func(was, next *model.Row) error) (*model.Row, uint64, error) {
	var (
		row       *model.Row
		rev       uint64
		conflicts int
	)
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(2*time.Millisecond),
		backoff.WithMaxInterval(250*time.Millisecond),
		backoff.WithMaxElapsedTime(s.maxRetry),
	)
	op := func() error {
		cur, curRev, err := s.Get(ctx, id)
		if err != nil {
			if !jsfault.IsTransient(ctx, err) {
				return backoff.Permanent(err) // not found, corrupt, a missing bucket…
			}
			return err
		}
		next := cur.Clone()
		if err := fn(cur, next); err != nil {
			if errors.Is(err, ErrNoChange) {
				row, rev = cur, curRev
				return nil
			}
			return backoff.Permanent(err)
		}
		newRev, err := s.Update(ctx, next, curRev)
		if err != nil && !errors.Is(err, ErrConflict) && !jsfault.IsTransient(ctx, err) {
			return backoff.Permanent(err)
		}
		if errors.Is(err, ErrConflict) {
			// Another writer got in: that is progress, not a fault, so a
			// lost race restarts the time budget (kept for faults) and only
			// a count bounds it.
			if conflicts++; conflicts > maxConflicts {
				return backoff.Permanent(fmt.Errorf("%w (%d times in a row)", err, conflicts))
			}
			b.Reset()
			return err
		}
		if err != nil {
			return err // transient faults are retried within the time budget
		}
		row, rev = next, newRev
		return nil
	}
	if err := backoff.Retry(op, backoff.WithContext(b, ctx)); err != nil {
		return nil, 0, err
	}
	return row, rev, nil
}

// MutateFrom is Mutate starting from a row the caller already holds: known,
// read (or written) at revision rev, spares the first read. fn is applied to
// a copy of known; if that write loses a race, or fn rejects known (which
// may be stale), Mutate re-reads the row and decides. A nil known reads
// first, exactly as Mutate.
func (s *Store) MutateFrom(ctx context.Context, id string, known *model.Row, rev uint64, fn func(*model.Row) error) (*model.Row, uint64, error) {
	if known == nil {
		return s.Mutate(ctx, id, fn)
	}
	next := known.Clone()
	if err := keepFinal(fn)(known, next); err != nil {
		if errors.Is(err, ErrNoChange) {
			return known, rev, nil
		}
		return s.Mutate(ctx, id, fn)
	}
	newRev, err := s.Update(ctx, next, rev)
	if errors.Is(err, ErrConflict) || jsfault.IsTransient(ctx, err) {
		return s.Mutate(ctx, id, fn)
	}
	if err != nil {
		return nil, 0, err
	}
	return next, newRev, nil
}

// List returns every row for which keep returns true (all rows when keep is
// nil), reading the bucket in one pass.
func (s *Store) List(ctx context.Context, keep func(*model.Row) bool) ([]*model.Row, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("kv: list runs: %w", err)
	}
	defer w.Stop()
	var out []*model.Row
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kv: list runs: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("kv: list runs: watcher closed")
			}
			if e == nil {
				return out, nil
			}
			r, err := Decode(e.Key(), e.Value())
			if err != nil {
				continue // a corrupt row is reported by Get, not by a listing
			}
			if keep == nil || keep(r) {
				out = append(out, r)
			}
		}
	}
}

// Decode decodes the row stored under key (a row written without its id
// takes the key's). Undecodable data is ErrCorruptRow.
func Decode(key string, data []byte) (*model.Row, error) {
	var r model.Row
	if !model.DecodeRowFast(data, &r) {
		r = model.Row{}
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("kv: run %s: %w: %v", key, ErrCorruptRow, err)
		}
	}
	if r.ID == "" {
		r.ID = key
	}
	return &r, nil
}

// rows returns the row store over c.
func (c *core) rows() *Store { return &Store{c} }
