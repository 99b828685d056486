package runstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

// A worker process proves it is alive with one key in the active bucket,
// worker.<id>, written with a per-key TTL of one lease and renewed every
// third of a lease. The rows of the runs it holds name the worker and the
// epoch of its key; a run's holder is alive while that key exists with that
// epoch. So the stored writes that keep thousands of waiting runs held are
// one per worker every few seconds, not one per run; and the moment a worker
// dies (its key expires) every run it held can be taken over.
//
// The epoch changes whenever a worker process starts (also when it restarts
// with the same id), so runs held by a process that died are known to be
// lost at once when its successor acquires the key. A process whose key
// lapsed while it lived on (JetStream unreachable for longer than a lease)
// resumes the same epoch (Liveness.Resume), unless another incarnation
// took the key meanwhile.

const workerPrefix = "worker."

// ErrLivenessLost is returned by Liveness.Renew when the worker's key
// expired or was replaced: every run the worker held may now belong to
// another worker.
var ErrLivenessLost = errors.New("worker liveness lost")

// Liveness is one worker process's liveness key. Renew it every third of
// its TTL from one goroutine.
type Liveness struct {
	s      *core
	worker string
	epoch  string
	ttl    time.Duration

	mu  sync.Mutex
	rev uint64
}

type livenessValue struct {
	Epoch string    `json:"epoch"`
	Since time.Time `json:"since"`
	// TTLMs is the key's TTL: the bucket leaves no marker when the key
	// expires (it refuses roll-ups, see bucket.Harden), so a watcher
	// counts the lapse itself (WorkerWatch).
	TTLMs int64 `json:"ttlMs,omitempty"`
}

// fallbackLivenessTTL is the TTL assumed for a key written without one
// (an older worker).
const fallbackLivenessTTL = 15 * time.Second

// liveKey is a followed liveness key: its epoch and when it lapses unless
// renewed, counted from when the watcher received it (never earlier than
// the server expires it).
type liveKey struct {
	epoch string
	until time.Time
}

// Acquire writes worker's liveness key with a fresh epoch and a TTL
// of ttl (at least a second), replacing any key an earlier incarnation of
// the same id left behind.
func (s Workers) Acquire(ctx context.Context, worker string, ttl time.Duration) (*Liveness, error) {
	var b [9]byte
	_, _ = rand.Read(b[:])
	l := &Liveness{s: s.core, worker: worker, epoch: fmt.Sprintf("%x", b), ttl: max(ttl, time.Second)}
	data, err := json.Marshal(livenessValue{Epoch: l.epoch, Since: time.Now(), TTLMs: l.ttl.Milliseconds()})
	if err != nil {
		return nil, fmt.Errorf("kv: encode liveness of worker %s: %w", worker, err)
	}
	ack, err := s.js.Publish(ctx, s.activeSubject(workerPrefix+worker), data, jetstream.WithMsgTTL(l.ttl))
	if err != nil {
		return nil, fmt.Errorf("kv: acquire liveness of worker %s: %w", worker, err)
	}
	l.rev = ack.Sequence
	return l, nil
}

// Epoch returns the key's epoch, written on the rows the worker claims.
func (l *Liveness) Epoch() string { return l.epoch }

// Renew extends the key by its TTL with a compare-and-set on its revision.
// It returns ErrLivenessLost if the key expired or another incarnation
// replaced it; any other error is the write's (retry it while the key has
// not expired).
func (l *Liveness) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	data, err := json.Marshal(livenessValue{Epoch: l.epoch, Since: time.Now(), TTLMs: l.ttl.Milliseconds()})
	if err != nil {
		return fmt.Errorf("kv: encode liveness of worker %s: %w", l.worker, err)
	}
	for try := 0; ; try++ {
		ack, err := l.s.js.Publish(ctx, l.s.activeSubject(workerPrefix+l.worker), data,
			jetstream.WithExpectLastSequencePerSubject(l.rev), jetstream.WithMsgTTL(l.ttl))
		if err == nil {
			l.rev = ack.Sequence
			return nil
		}
		if !wire.IsWrongLastSequence(err) {
			return fmt.Errorf("kv: renew liveness of worker %s: %w", l.worker, err)
		}
		// A renewal whose answer was lost (a fault, a leader election)
		// landed all the same: the key still holds this epoch, at a
		// revision this process did not see. Go on from it. The key is
		// read from the leader: a replica that is behind would show an
		// older revision and make the worker lapse for nothing.
		if try == 0 {
			v, rev, ok, rerr := l.s.readLiveness(ctx, l.worker)
			if rerr != nil {
				return fmt.Errorf("kv: renew liveness of worker %s: %w", l.worker, rerr)
			}
			if ok && v.Epoch == l.epoch {
				l.rev = rev
				continue
			}
		}
		return fmt.Errorf("kv: renew liveness of worker %s: %w", l.worker, ErrLivenessLost)
	}
}

// readLiveness reads worker's liveness key from the active bucket's leader
// (see leader.go). rev is the subject's last sequence, also when ok is false
// because the key is gone (a marker, 0 when nothing was ever written).
func (s *core) readLiveness(ctx context.Context, worker string) (v livenessValue, rev uint64, ok bool, err error) {
	subject := s.activeSubject(workerPrefix + worker)
	var m *jetstream.RawStreamMsg
	if s.replicas > 1 {
		m, err = leaderLastRaw(ctx, s.js.Conn(), "KV_"+s.active.Bucket(), subject)
	} else {
		m, err = s.activeKV.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			m, err = nil, nil
		}
	}
	if err != nil {
		return v, 0, false, fmt.Errorf("read liveness of worker %s: %w", worker, err)
	}
	if m == nil {
		return v, 0, false, nil
	}
	if isMarker(m.Header) || json.Unmarshal(m.Data, &v) != nil {
		return livenessValue{}, m.Sequence, false, nil
	}
	return v, m.Sequence, true, nil
}

// Resume takes the key back for the same epoch after a lapse (the key
// expired while JetStream could not be reached, or a renewal could not land
// in time): if the key is gone it is created again with this epoch; if it
// still holds this epoch, it is extended by its TTL. Either way the rows
// naming the epoch are held again. It returns ErrLivenessLost if another
// incarnation of the worker holds the key: this epoch is over for good.
// Any other error is the call's (retry it).
//
// Resuming is safe because a lapse stops every attempt of the worker (see
// the worker package): what the epoch says after a resume is only that the
// process is alive, and every attempt is fenced by its own number on the
// row and its status event, not by the epoch.
func (l *Liveness) Resume(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	data, err := json.Marshal(livenessValue{Epoch: l.epoch, Since: time.Now(), TTLMs: l.ttl.Milliseconds()})
	if err != nil {
		return fmt.Errorf("kv: encode liveness of worker %s: %w", l.worker, err)
	}
	v, last, ok, err := l.s.readLiveness(ctx, l.worker)
	switch {
	case err != nil:
		return fmt.Errorf("kv: resume liveness of worker %s: %w", l.worker, err)
	case ok && v.Epoch != l.epoch:
		return fmt.Errorf("kv: resume liveness of worker %s: another incarnation holds it: %w", l.worker, ErrLivenessLost)
	}
	// Gone: create it again, unless someone wrote it since the read. Still
	// ours: extend it by a whole TTL now. Going on from it as it is would
	// let a key near (or past: a new leader expires TTLs it inherited a
	// little later) its end expire right after the resume, and the worker
	// would lapse a second time, stopping what it claimed meanwhile.
	ack, err := l.s.js.Publish(ctx, l.s.activeSubject(workerPrefix+l.worker), data,
		jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgTTL(l.ttl))
	if err != nil {
		return fmt.Errorf("kv: resume liveness of worker %s: %w", l.worker, err) // a wrong sequence too: read again next time
	}
	l.rev = ack.Sequence
	return nil
}

// Release deletes the key at once (graceful shutdown), so runs the worker
// did not hand back are taken over without waiting for the TTL.
func (l *Liveness) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := bucket.DeleteKey(ctx, l.s.js, l.s.active.Bucket(), workerPrefix+l.worker, indexMarkerTTL,
		jetstream.WithExpectLastSequencePerSubject(l.rev)); err != nil && !wire.IsWrongLastSequence(err) {
		return fmt.Errorf("kv: release liveness of worker %s: %w", l.worker, err)
	}
	return nil
}

// Alive reports whether worker's liveness key exists with epoch.
func (s Workers) Alive(ctx context.Context, worker, epoch string) (bool, error) {
	alive, _, err := s.aliveUntil(ctx, worker, epoch)
	return alive, err
}

// aliveUntil is Alive, and when the key exists with epoch, until says when
// it expires unless renewed (zero when not known): the server's time of its
// last write plus its TTL.
func (s Workers) aliveUntil(ctx context.Context, worker, epoch string) (alive bool, until time.Time, err error) {
	cur, until, err := s.key(ctx, worker)
	switch {
	case err != nil:
		return false, time.Time{}, err
	case cur == epoch:
		return true, until, nil
	case s.replicas <= 1:
		return false, time.Time{}, nil
	}
	// A replica that is behind (a node that rejoined after an outage) may
	// not show the key's newest value yet (nats-server #4710): before a
	// live worker's runs are taken over as a dead one's, ask the leader.
	v, _, ok, err := s.readLiveness(ctx, worker)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("kv: %w", err)
	}
	return ok && v.Epoch == epoch, time.Time{}, nil
}

// Epoch returns the epoch of worker's liveness key, "" when it has
// none (the worker is gone, or its key lapsed and it did not resume yet).
func (s Workers) Epoch(ctx context.Context, worker string) (string, error) {
	epoch, _, err := s.key(ctx, worker)
	return epoch, err
}

// key reads worker's liveness key: its epoch ("" when there is none) and
// when it expires unless renewed, by the server's clock (its write time
// plus its TTL).
func (s Workers) key(ctx context.Context, worker string) (epoch string, until time.Time, err error) {
	e, err := s.active.Get(ctx, workerPrefix+worker)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("kv: read liveness of worker %s: %w", worker, err)
	}
	var v livenessValue
	if json.Unmarshal(e.Value(), &v) != nil {
		return "", time.Time{}, nil
	}
	ttl := time.Duration(v.TTLMs) * time.Millisecond
	if ttl <= 0 {
		ttl = fallbackLivenessTTL
	}
	return v.Epoch, e.Created().Add(ttl), nil
}

// HolderAlive reports whether a live worker holds r: r names a worker and
// that worker's liveness key exists with the epoch on r. A row claimed
// without an epoch (an older worker) is held until its leaseUntil.
func (s Workers) HolderAlive(ctx context.Context, r *model.Row) (bool, error) {
	alive, _, err := s.HolderUntil(ctx, r)
	return alive, err
}

// HolderUntil is HolderAlive, and for a live holder until says when it
// stops holding r unless it renews its liveness: when its key expires (by
// the server's clock), or r's leaseUntil for a row of an older worker.
// until is zero when not known. A worker handed a dispatch of a run held
// elsewhere looks at it again then, so the run of a holder that died is
// taken over as soon as its key is gone, not a whole lease later.
func (s Workers) HolderUntil(ctx context.Context, r *model.Row) (alive bool, until time.Time, err error) {
	if r.Worker == "" {
		return false, time.Time{}, nil
	}
	if r.WorkerEpoch == "" {
		return time.Now().Before(r.LeaseUntil), r.LeaseUntil, nil
	}
	return s.aliveUntil(ctx, r.Worker, r.WorkerEpoch)
}

// WorkerWatch follows every worker's liveness key in memory, for a process
// that checks many runs' holders (the reconciler) or notices lost workers
// (a worker, for the runs they shelved): one watch, whose cost grows with
// the number of workers.
type WorkerWatch struct {
	mu     sync.Mutex
	epochs map[string]liveKey // worker id → its key
	ready  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// Watch starts following the liveness keys and returns once the
// current ones are loaded; ctx bounds that load. It runs until Stop; a broken
// watch is re-created.
func (s Workers) Watch(ctx context.Context) (*WorkerWatch, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ws := &WorkerWatch{epochs: make(map[string]liveKey), ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go ws.loop(wctx, s.core)
	select {
	case <-ws.ready:
		return ws, nil
	case <-ctx.Done():
		ws.Stop()
		return nil, fmt.Errorf("kv: load worker liveness: %w", ctx.Err())
	}
}

func (ws *WorkerWatch) loop(ctx context.Context, s *core) {
	defer close(ws.done)
	first := true
	bo := jsfault.NewBackOff(rewatchPause) // reset by a watch that loads
	for ctx.Err() == nil {
		w, err := s.active.Watch(ctx, workerPrefix+">")
		if err != nil {
			_ = jsfault.Sleep(ctx, bo.NextBackOff())
			continue
		}
		fresh := make(map[string]liveKey)
		for e := range updates(ctx, w) {
			ws.mu.Lock()
			if e == nil {
				ws.epochs = fresh
			} else if id := strings.TrimPrefix(e.Key(), workerPrefix); e.Operation() == jetstream.KeyValuePut {
				var v livenessValue
				if json.Unmarshal(e.Value(), &v) == nil {
					ttl := time.Duration(v.TTLMs) * time.Millisecond
					if ttl <= 0 {
						ttl = fallbackLivenessTTL
					}
					fresh[id] = liveKey{epoch: v.Epoch, until: time.Now().Add(ttl)}
				}
			} else {
				delete(fresh, id)
			}
			ws.mu.Unlock()
			if e == nil {
				bo.Reset()
			}
			if e == nil && first {
				first = false
				close(ws.ready)
			}
		}
		_ = w.Stop()
		_ = jsfault.Sleep(ctx, bo.NextBackOff())
	}
}

// Alive reports whether a live worker holds r (see Workers.HolderAlive), from
// the followed keys.
func (ws *WorkerWatch) Alive(r *model.Row) bool {
	if r.Worker == "" {
		return false
	}
	if r.WorkerEpoch == "" {
		return time.Now().Before(r.LeaseUntil)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	k, ok := ws.epochs[r.Worker]
	return ok && k.epoch == r.WorkerEpoch && time.Now().Before(k.until)
}

// Live returns the epoch of every worker whose key is followed and has not
// lapsed, by worker id.
func (ws *WorkerWatch) Live() map[string]string {
	now := time.Now()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make(map[string]string, len(ws.epochs))
	for id, k := range ws.epochs {
		if now.Before(k.until) {
			out[id] = k.epoch
		}
	}
	return out
}

// Key returns worker's followed key: its epoch (empty when there is no key)
// and whether it has not lapsed.
func (ws *WorkerWatch) Key(worker string) (epoch string, alive bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	k, ok := ws.epochs[worker]
	return k.epoch, ok && time.Now().Before(k.until)
}

// Stop ends the watch and waits for its goroutine. It is idempotent.
func (ws *WorkerWatch) Stop() {
	ws.cancel()
	<-ws.done
}
