package limits

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
)

// Key prefixes in the limits bucket.
const (
	specPrefix  = "spec."
	poolPrefix  = "pool."
	pausePrefix = "pause."
)

// Pool is what the fleet took of a limit: the current window's leased
// requests and tokens, and each worker's holding.
type Pool struct {
	Window   int64             `json:"window"`   // window index: Unix ms / window ms
	Requests int64             `json:"requests"` // leased to workers this window
	Tokens   int64             `json:"tokens"`
	Holders  map[string]Holder `json:"holders,omitempty"`
	Last     *Totals           `json:"last,omitempty"` // the previous window's use
}

// Holder is one worker's holding of a limit and what it reported at its
// last compare-and-set on the pool.
type Holder struct {
	Requests   int64 `json:"requests,omitempty"`   // leased this window
	Tokens     int64 `json:"tokens,omitempty"`     // leased this window
	Concurrent int64 `json:"concurrent,omitempty"` // slots held
	UntilMs    int64 `json:"untilMs"`              // lease: dropped after it
	// What it reported: this window's granted requests and tokens (settled
	// where known), slots in use, reservations waiting, per-tenant grants.
	Used    Totals `json:"used"`
	InUse   int64  `json:"inUse,omitempty"`
	Waiting int64  `json:"waiting,omitempty"`
	Granted int64  `json:"granted,omitempty"` // since the worker started
	// Its waiting and open reservations per tenant (while some wait), the
	// tokens the waiting ones ask for and the window it reported them in:
	// the fleet's fair shares (fair.go).
	Tenants map[string]int64 `json:"tenants,omitempty"`
	Demand  int64            `json:"demand,omitempty"`
	Seen    int64            `json:"seen,omitempty"`
}

// Totals are the requests and tokens of a window, per tenant too.
type Totals struct {
	Window   int64            `json:"window,omitempty"`
	Requests int64            `json:"requests"`
	Tokens   int64            `json:"tokens"`
	Tenants  map[string]int64 `json:"tenants,omitempty"` // requests per tenant
}

// Pause holds every reservation of a limit until UntilMs.
type Pause struct {
	UntilMs int64  `json:"untilMs"`
	Reason  string `json:"reason,omitempty"`
	Worker  string `json:"worker,omitempty"`
	Count   int64  `json:"count"` // pauses of the limit so far
}

// Until returns when the pause ends.
func (p Pause) Until() time.Time { return time.UnixMilli(p.UntilMs) }

// Store is the limits bucket. It is safe for concurrent use.
type Store struct {
	kv jetstream.KeyValue
}

// Open binds the limits bucket of ns, creating it (with replicas) when it
// does not exist.
func Open(ctx context.Context, js jetstream.JetStream, ns wire.Namespace, replicas int) (*Store, error) {
	name := ns.LimitsBucket()
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: "jetrun provider limits: spec.<name>, pool.<name> (leases), pause.<name>",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    cmp.Or(replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("limits: open bucket %s: %w", name, err)
	}
	return &Store{kv: kv}, nil
}

// Put stores spec (validated first; nothing is stored when it is bad).
func (s *Store) Put(ctx context.Context, spec Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("limits: encode %s: %w", spec.Name, err)
	}
	if _, err := s.kv.Put(ctx, specPrefix+spec.Name, data); err != nil {
		return fmt.Errorf("limits: store %s: %w", spec.Name, err)
	}
	return nil
}

// Delete removes the limit name, its pool and its pause.
func (s *Store) Delete(ctx context.Context, name string) error {
	if _, err := s.Spec(ctx, name); err != nil {
		return err
	}
	for _, k := range []string{specPrefix, poolPrefix, pausePrefix} {
		if err := s.kv.Delete(ctx, k+name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("limits: delete %s: %w", name, err)
		}
	}
	return nil
}

// Specs returns every stored limit, by name.
func (s *Store) Specs(ctx context.Context) ([]Spec, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, specPrefix+">")
	if err != nil {
		return nil, fmt.Errorf("limits: list: %w", err)
	}
	var specs []Spec
	for key := range lister.Keys() {
		spec, err := s.Spec(ctx, strings.TrimPrefix(key, specPrefix))
		if err != nil {
			continue // deleted meanwhile
		}
		specs = append(specs, spec)
	}
	slices.SortFunc(specs, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	return specs, nil
}

// Spec returns the limit name, or ErrUnknownLimit naming the stored ones.
func (s *Store) Spec(ctx context.Context, name string) (Spec, error) {
	e, err := s.kv.Get(ctx, specPrefix+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return Spec{}, s.unknown(ctx, name)
	}
	if err != nil {
		return Spec{}, fmt.Errorf("limits: read %s: %w", name, err)
	}
	var spec Spec
	if err := json.Unmarshal(e.Value(), &spec); err != nil {
		return Spec{}, fmt.Errorf("limits: decode %s: %w", name, err)
	}
	return spec, nil
}

func (s *Store) unknown(ctx context.Context, name string) error {
	var names []string
	if lister, err := s.kv.ListKeysFiltered(ctx, specPrefix+">"); err == nil {
		for key := range lister.Keys() {
			names = append(names, strings.TrimPrefix(key, specPrefix))
		}
	}
	return UnknownError(name, names)
}

// UnknownError is ErrUnknownLimit for name, naming the configured limits.
func UnknownError(name string, configured []string) error {
	slices.Sort(configured)
	if len(configured) == 0 {
		return fmt.Errorf("%w %q: no limit is configured (JETRUN_LIMITS, PUT /v1/limits/{name})", ErrUnknownLimit, name)
	}
	return fmt.Errorf("%w %q: the configured limits are %s", ErrUnknownLimit, name, strings.Join(configured, ", "))
}

// pool reads the pool of name and its revision (0: none yet).
func (s *Store) pool(ctx context.Context, name string) (Pool, uint64, error) {
	e, err := s.kv.Get(ctx, poolPrefix+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Pool{}, 0, nil
	}
	if err != nil {
		return Pool{}, 0, fmt.Errorf("limits: read pool %s: %w", name, err)
	}
	var p Pool
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return Pool{}, 0, fmt.Errorf("limits: decode pool %s: %w", name, err)
	}
	return p, e.Revision(), nil
}

// errConflict is a lost compare-and-set: read again and retry.
var errConflict = errors.New("limits: compare-and-set conflict")

// writePool stores p over revision rev (0: create).
func (s *Store) writePool(ctx context.Context, name string, p Pool, rev uint64) error {
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("limits: encode pool %s: %w", name, err)
	}
	if rev == 0 {
		_, err = s.kv.Create(ctx, poolPrefix+name, data)
	} else {
		_, err = s.kv.Update(ctx, poolPrefix+name, data, rev)
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("limits: write pool %s: %w", name, err)
	}
	return nil
}

// pause reads the pause of name (zero: none) and its revision.
func (s *Store) pause(ctx context.Context, name string) (Pause, uint64, error) {
	e, err := s.kv.Get(ctx, pausePrefix+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Pause{}, 0, nil
	}
	if err != nil {
		return Pause{}, 0, fmt.Errorf("limits: read pause %s: %w", name, err)
	}
	var p Pause
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return Pause{}, 0, fmt.Errorf("limits: decode pause %s: %w", name, err)
	}
	return p, e.Revision(), nil
}

// SetPause pauses limit name until until, unless a pause already lasts
// longer; it returns the pause in force.
func (s *Store) SetPause(ctx context.Context, name string, until time.Time, reason, worker string) (Pause, error) {
	for {
		p, rev, err := s.pause(ctx, name)
		if err != nil {
			return Pause{}, err
		}
		if p.UntilMs >= until.UnixMilli() {
			return p, nil
		}
		next := Pause{UntilMs: until.UnixMilli(), Reason: reason, Worker: worker, Count: p.Count + 1}
		data, err := json.Marshal(next)
		if err != nil {
			return Pause{}, fmt.Errorf("limits: encode pause %s: %w", name, err)
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, pausePrefix+name, data)
		} else {
			_, err = s.kv.Update(ctx, pausePrefix+name, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return Pause{}, fmt.Errorf("limits: pause %s: %w", name, err)
		}
		return next, nil
	}
}

// Status is one limit as the fleet holds it, for metrics, the CLI and the
// UI.
type Status struct {
	Spec  Spec  `json:"spec"`
	Pool  Pool  `json:"pool"`
	Pause Pause `json:"pause"`
	// Summed over live holders.
	Waiting  int64  `json:"waiting"`
	InUse    int64  `json:"inUse"`
	Granted  int64  `json:"granted"`
	Current  Totals `json:"current"` // this window so far, as reported
	Paused   bool   `json:"paused"`
	Holders  int    `json:"holders"`
	WindowMs int64  `json:"windowMs"`
}

// Statuses returns every limit's status, by name.
func (s *Store) Statuses(ctx context.Context) ([]Status, error) {
	specs, err := s.Specs(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(specs))
	now := time.Now()
	for _, spec := range specs {
		st, err := s.status(ctx, spec, now)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Status returns limit name's status.
func (s *Store) Status(ctx context.Context, name string) (Status, error) {
	spec, err := s.Spec(ctx, name)
	if err != nil {
		return Status{}, err
	}
	return s.status(ctx, spec, time.Now())
}

func (s *Store) status(ctx context.Context, spec Spec, now time.Time) (Status, error) {
	p, _, err := s.pool(ctx, spec.Name)
	if err != nil {
		return Status{}, err
	}
	pause, _, err := s.pause(ctx, spec.Name)
	if err != nil {
		return Status{}, err
	}
	st := Status{Spec: spec, Pool: p, Pause: pause, Paused: pause.UntilMs > now.UnixMilli(), WindowMs: spec.Window().Milliseconds()}
	w := windowOf(now, spec)
	st.Current = Totals{Window: w, Tenants: map[string]int64{}}
	for _, h := range p.Holders {
		if h.UntilMs < now.UnixMilli() {
			continue
		}
		st.Holders++
		st.Waiting += h.Waiting
		st.InUse += h.InUse
		st.Granted += h.Granted
		if p.Window == w {
			st.Current.add(h.Used)
		}
	}
	if p.Last != nil && p.Last.Window != w-1 {
		st.Pool.Last = nil // no use in the window before this one
	}
	return st, nil
}

func (t *Totals) add(o Totals) {
	t.Requests += o.Requests
	t.Tokens += o.Tokens
	for k, v := range o.Tenants {
		if t.Tenants == nil {
			t.Tenants = map[string]int64{}
		}
		t.Tenants[k] += v
	}
}

// windowOf returns the index of the window now falls in.
func windowOf(now time.Time, spec Spec) int64 {
	return now.UnixMilli() / spec.Window().Milliseconds()
}

// windowEnd returns when window w of spec ends.
func windowEnd(w int64, spec Spec) time.Time {
	return time.UnixMilli((w + 1) * spec.Window().Milliseconds())
}
