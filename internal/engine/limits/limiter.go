package limits

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// Defaults of a Config's zero fields.
const (
	// DefaultLease is how long a worker's holding outlives its last
	// renewal: a killed worker's slots return within it.
	DefaultLease = 10 * time.Second
	// DefaultMaxWait bounds how long a reservation waits for room.
	DefaultMaxWait = 10 * time.Minute
	// MaxPause bounds a pause: a provider asking for more is paused this
	// long, then asked again.
	MaxPause = time.Hour
)

// More errors of Reserve.
var (
	// ErrWaitTooLong is returned by Reserve when a reservation waited
	// Config.MaxWait without room.
	ErrWaitTooLong = errors.New("limits: waited too long for room")
	// ErrStopped is returned by Reserve on a stopped Limiter.
	ErrStopped = errors.New("limits: limiter stopped")
)

// Config configures a Limiter.
type Config struct {
	Store   *Store
	Worker  string        // the holder's id in the pools: unique per process
	Lease   time.Duration // 0: DefaultLease
	MaxWait time.Duration // 0: DefaultMaxWait
	Logger  *slog.Logger  // nil: discard
}

// Limiter serves one process's reservations against the fleet's limits
// (see the package doc). Start it before Reserve; Stop returns what it
// holds. It is safe for concurrent use.
type Limiter struct {
	cfg    Config
	log    *slog.Logger
	mu     sync.Mutex
	limits map[string]*local
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	start  atomic.Bool
	counts Counts
}

// Counts are a Limiter's round trips to the pools, for benchmarks and
// metrics.
type Counts struct {
	Granted   atomic.Int64 // reservations granted
	Writes    atomic.Int64 // compare-and-sets that landed
	Conflicts atomic.Int64 // compare-and-sets lost to another worker
	Reads     atomic.Int64 // pool reads
}

// Counts returns the limiter's counters.
func (l *Limiter) Counts() *Counts { return &l.counts }

// local is a Limiter's state of one limit.
type local struct {
	name    string
	spec    Spec
	deleted bool
	window  int64
	// The slice of this window leased from the pool, and what is left.
	reqLeft, tokLeft     int64
	reqLeased, tokLeased int64
	concHeld, concUsed   int64
	pausedUntil          time.Time
	pauses               int64
	q                    fairQueue
	used                 Totals // this window's grants
	granted              int64
	held                 bool                // the pool lists this worker
	reportedWaiting      int64               // Waiting as last written
	blockedUntil         time.Time           // the pool had no room for the head
	othersWaiting        bool                // another holder reported waiters
	others               map[string]int64    // waiting per tenant at the other fresh holders
	open                 map[*Grant]struct{} // grants not settled or released yet
	renewAt              time.Time
	idleSince            time.Time // when the queue last emptied (zero: it is not empty)
	reportedGranted      int64     // granted as last written to the pool
	reportedAt           time.Time // when
}

// New returns a Limiter; Start starts it.
func New(cfg Config) (*Limiter, error) {
	if cfg.Store == nil {
		return nil, errors.New("limits: config: Store is required")
	}
	if err := events.ValidateToken("worker id", cfg.Worker); err != nil {
		return nil, fmt.Errorf("limits: config: %w", err)
	}
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, DefaultMaxWait)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{
		cfg: cfg, log: log, limits: map[string]*local{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Start watches the limits bucket and starts serving reservations. It
// returns once the stored specs and pauses are loaded.
func (l *Limiter) Start(ctx context.Context) error {
	if !l.start.CompareAndSwap(false, true) {
		return errors.New("limits: started twice")
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := l.cfg.Store.kv.WatchAll(ctx)
	if err != nil {
		cancel()
		close(l.done)
		return fmt.Errorf("limits: watch: %w", err)
	}
	loaded := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		l.watch(w, loaded)
	}()
	go func() {
		defer wg.Done()
		l.loop(wctx)
	}()
	go func() {
		<-l.stop
		_ = w.Stop()
		cancel()
		wg.Wait()
		close(l.done)
	}()
	select {
	case <-loaded:
		return nil
	case <-ctx.Done():
		l.Stop(context.Background())
		return fmt.Errorf("limits: load: %w", ctx.Err())
	}
}

// Stop stops serving (waiting reservations get ErrStopped) and returns
// what this worker holds to the pools. It is idempotent and safe before
// Start.
func (l *Limiter) Stop(ctx context.Context) {
	l.once.Do(func() {
		close(l.stop)
		if !l.start.Load() {
			return
		}
		<-l.done
		l.mu.Lock()
		var names []string
		for name, loc := range l.limits {
			for _, w := range loc.q.drain() {
				w.ch <- result{err: ErrStopped}
			}
			if loc.held {
				names = append(names, name)
			}
		}
		l.mu.Unlock()
		for _, name := range names {
			if err := l.leave(ctx, name); err != nil {
				l.log.WarnContext(ctx, "limits: return holding", "limit", name, "error", err)
			}
		}
	})
}

func (l *Limiter) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// watch applies the bucket's changes to the limiter's state.
func (l *Limiter) watch(w jetstream.KeyWatcher, loaded chan struct{}) {
	for e := range w.Updates() {
		if e == nil {
			close(loaded)
			continue
		}
		l.apply(e)
		l.poke()
	}
}

func (l *Limiter) apply(e jetstream.KeyValueEntry) {
	del := e.Operation() != jetstream.KeyValuePut
	l.mu.Lock()
	defer l.mu.Unlock()
	switch key := e.Key(); {
	case strings.HasPrefix(key, specPrefix):
		name := strings.TrimPrefix(key, specPrefix)
		var spec Spec
		if !del && json.Unmarshal(e.Value(), &spec) != nil {
			return
		}
		loc := l.limits[name]
		if loc == nil {
			if del {
				return
			}
			loc = &local{name: name}
			l.limits[name] = loc
		}
		if del {
			loc.deleted = true
			for _, w := range loc.q.drain() {
				w.ch <- result{err: UnknownError(name, l.namesLocked())}
			}
			delete(l.limits, name)
			return
		}
		loc.spec, loc.deleted = spec, false
	case strings.HasPrefix(key, pausePrefix):
		var p Pause
		loc := l.limits[strings.TrimPrefix(key, pausePrefix)]
		if loc == nil || del || json.Unmarshal(e.Value(), &p) != nil {
			return
		}
		if u := p.Until(); u.After(loc.pausedUntil) {
			loc.pausedUntil = u
		}
		loc.pauses = max(loc.pauses, p.Count)
	case strings.HasPrefix(key, poolPrefix):
		var p Pool
		loc := l.limits[strings.TrimPrefix(key, poolPrefix)]
		if loc == nil || del || json.Unmarshal(e.Value(), &p) != nil {
			return
		}
		loc.seeOthersLocked(&p, l.cfg.Worker, time.Now())
		loc.blockedUntil = time.Time{} // the pool changed: look again
	}
}

// seeOthersLocked notes what the other live holders of p have waiting.
func (loc *local) seeOthersLocked(p *Pool, self string, now time.Time) {
	loc.othersWaiting = false
	loc.others = map[string]int64{}
	for id, h := range p.Holders {
		if id == self || h.UntilMs < now.UnixMilli() || h.Waiting <= 0 {
			continue
		}
		loc.othersWaiting = true
		if h.fresh(max(p.Window, windowOf(now, loc.spec))) {
			for t, n := range h.Tenants {
				loc.others[t] += n
			}
		}
	}
}

func (l *Limiter) namesLocked() []string {
	names := make([]string, 0, len(l.limits))
	for name, loc := range l.limits {
		if !loc.deleted {
			names = append(names, name)
		}
	}
	return names
}

// Reserve waits until limit name has room for one request of tokens
// tokens (input+output, an estimate: Grant.Settle counts the real ones)
// and one concurrent call, served fairly among tenants, and returns the
// grant. It waits at most Config.MaxWait and until ctx ends; bad amounts
// and unknown limits are refused at once, reserving nothing.
func (l *Limiter) Reserve(ctx context.Context, name, tenant string, tokens int64) (*Grant, error) {
	if tokens < 0 || tokens > MaxRate {
		return nil, fmt.Errorf("%w: %d tokens on limit %s: want 0 to %d", ErrBadReservation, tokens, name, MaxRate)
	}
	if tenant != "" {
		if err := events.ValidateToken("tenant", tenant); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadReservation, err)
		}
	}
	select {
	case <-l.stop:
		return nil, ErrStopped
	default:
	}
	if tenant == "" {
		tenant = DefaultTenant
	}
	loc, err := l.local(ctx, name)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if loc.spec.Tokens > 0 && tokens > loc.spec.Tokens {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %d tokens on limit %s, which grants at most %d per window", ErrBadReservation, tokens, name, loc.spec.Tokens)
	}
	w := &waiter{tenant: tenant, tokens: tokens, ch: make(chan result, 1)}
	loc.q.push(w)
	l.mu.Unlock()
	l.poke()
	timer := time.NewTimer(l.cfg.MaxWait)
	defer timer.Stop()
	select {
	case r := <-w.ch:
		return r.g, r.err
	case <-ctx.Done():
		err = fmt.Errorf("limits: reserve on %s: %w", name, ctx.Err())
	case <-timer.C:
		err = fmt.Errorf("%w: %s on limit %s", ErrWaitTooLong, l.cfg.MaxWait, name)
	case <-l.stop:
		err = ErrStopped
	}
	l.mu.Lock()
	removed := loc.q.remove(w)
	l.mu.Unlock()
	if !removed { // served meanwhile
		if r := <-w.ch; r.g != nil {
			r.g.Release()
		}
	}
	l.poke()
	return nil, err
}

// DefaultTenant is the tenant of a reservation whose run names none.
const DefaultTenant = "default"

// local returns the state of limit name, reading its spec from the
// bucket when the watch has not brought it yet.
func (l *Limiter) local(ctx context.Context, name string) (*local, error) {
	l.mu.Lock()
	loc := l.limits[name]
	l.mu.Unlock()
	if loc != nil {
		return loc, nil
	}
	if events.ValidateToken("limit name", name) != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, UnknownError(name, l.namesLocked())
	}
	spec, err := l.cfg.Store.Spec(ctx, name)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if loc = l.limits[name]; loc == nil {
		loc = &local{name: name, spec: spec}
		l.limits[name] = loc
	}
	return loc, nil
}

// Pause holds every reservation of limit name, across the fleet, for d
// (a provider's Retry-After). A longer pause in force stays.
func (l *Limiter) Pause(ctx context.Context, name string, d time.Duration, reason string) error {
	if d <= 0 {
		return fmt.Errorf("%w: pause of %s on limit %s: want a positive delay", ErrBadReservation, d, name)
	}
	d = min(d, MaxPause)
	until := time.Now().Add(d)
	loc, err := l.local(ctx, name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if until.After(loc.pausedUntil) {
		loc.pausedUntil = until
	}
	l.mu.Unlock()
	p, err := l.cfg.Store.SetPause(ctx, name, until, reason, l.cfg.Worker)
	if err != nil {
		return err
	}
	l.mu.Lock()
	loc.pauses = max(loc.pauses, p.Count)
	l.mu.Unlock()
	l.poke()
	return nil
}

// Waiting returns how many reservations wait on limit name in this
// process.
func (l *Limiter) Waiting(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if loc := l.limits[name]; loc != nil {
		return loc.q.len()
	}
	return 0
}

// openOf returns how many of tenant's grants are open.
func (loc *local) openOf(tenant string) int64 {
	var n int64
	for g := range loc.open {
		if g.tenant == tenant {
			n++
		}
	}
	return n
}

// Grant is a reservation served: one request, its tokens and one
// concurrent slot of a limit. Settle it with the real tokens, or Release
// it unused; either frees the slot. Only the first of them counts.
type Grant struct {
	l      *Limiter
	loc    *local
	window int64
	tokens int64
	tenant string
	pauses int64 // pauses of the limit this worker had seen when it granted
	at     time.Time
	weight float64 // its tenant's weight in the fair queue when granted
	// carried: granted in the window before loc's and charged to this one
	// too (carryLocked).
	carried bool
	done    atomic.Bool
}

// Pauses returns how many pauses of the limit the worker had seen when it
// granted the reservation.
func (g *Grant) Pauses() int64 { return g.pauses }

// Limit returns the name of the limit the grant is on.
func (g *Grant) Limit() string { return g.loc.name }

// Tokens returns the tokens reserved.
func (g *Grant) Tokens() int64 { return g.tokens }

// Settle ends the call with the tokens it really used: the difference
// from the reservation goes back to (or is taken from) this window.
func (g *Grant) Settle(tokens int64) { g.settle(tokens, time.Time{}) }

// SettleAnswered is Settle for a call the provider answered at answered
// (zero: not known). A grant made in a window's last tenth and still open
// when the window rolled is charged to the next window too, since the
// provider counts its call there if it reaches it after the roll
// (carryLocked); a call answered before the roll was counted in the
// window it was granted in, so the next window gets that charge back.
func (g *Grant) SettleAnswered(tokens int64, answered time.Time) { g.settle(tokens, answered) }

func (g *Grant) settle(tokens int64, answered time.Time) {
	if !g.done.CompareAndSwap(false, true) {
		return
	}
	tokens = max(tokens, 0)
	g.l.mu.Lock()
	loc := g.loc
	loc.rollLocked(time.Now()) // a grant open at the roll is carried first
	loc.concUsed--
	delete(loc.open, g)
	switch {
	case loc.window == g.window && g.carried && answeredBefore(answered, g.window, loc.spec):
		loc.uncarryLocked(g) // the provider counted it in the window before
	case loc.window == g.window:
		loc.tokLeft += g.tokens - tokens
		loc.used.Tokens += tokens - g.tokens
	}
	if loc.spec.Tokens > 0 { // the tenant is charged what the call used
		loc.q.charge(g.tenant, grantCost(loc.spec, tokens)-grantCost(loc.spec, g.tokens), g.weight)
	}
	g.l.mu.Unlock()
	g.l.poke()
}

// Release ends the reservation unused: its request and tokens go back to
// the window (if it has not rolled), its slot to the limit.
func (g *Grant) Release() {
	if !g.done.CompareAndSwap(false, true) {
		return
	}
	g.l.mu.Lock()
	loc := g.loc
	loc.rollLocked(time.Now()) // a grant open at the roll is carried first
	loc.concUsed--
	delete(loc.open, g)
	if loc.window == g.window {
		loc.uncarryLocked(g)
		if loc.used.Tenants != nil && !g.carried {
			loc.used.Tenants[g.tenant]--
		}
	}
	loc.q.charge(g.tenant, -grantCost(loc.spec, g.tokens), g.weight) // unused: refunded
	g.l.mu.Unlock()
	g.l.poke()
}
