// Package reconcile is jetrun's timer-driven reconciler: it enforces the
// budgets of detached runs, repairs runs whose dispatch or worker was lost,
// completes cancel cascades, republishes finishes that were never delivered,
// and clears old runs.
//
// Invariants:
//   - One reconciler is active at a time, through a lease in the active
//     bucket (key "leader": Create to win, revisioned Update to keep it).
//     Correctness never depends on it: every change is a compare-and-set on
//     the run's row, so two reconcilers, or a reconciler racing a worker,
//     cannot both win a transition.
//   - A sweep reads the active-run index (jetrun_active), never the runs
//     bucket: its cost grows with the runs that are not settled, not with
//     the runs retained. Retention runs on its own, slower timer.
//   - interrupted is soft: the reconciler gives a run up (and asks its
//     worker to stop), but a child that finishes anyway replaces it with its
//     real result. Awaited runs are never given up: only detached runs have
//     budgets.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/service"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Defaults used where Config leaves a field zero.
const (
	DefaultInterval         = 5 * time.Second
	DefaultMaxBudget        = 24 * time.Hour
	DefaultNoProgressBudget = time.Hour
	DefaultStartingGrace    = 30 * time.Second
	DefaultLeaseGrace       = 30 * time.Second
	DefaultMaxRedispatches  = 3
	DefaultParallelism      = 16
	DefaultHolderCheckEvery = time.Minute
	// DefaultFinishUnservedAfter is how long a finish may wait untaken
	// before a handler nobody follows is reported.
	DefaultFinishUnservedAfter = time.Minute
	// DefaultFinishUnservedWait is how long a finish may wait untaken,
	// with no deliverer following its handler, before it is dead-lettered.
	DefaultFinishUnservedWait = 24 * time.Hour
	// DefaultDispatchUnservedWait is zero: a dispatch no worker takes
	// waits for one, its row saying waiting-for-worker.
	DefaultDispatchUnservedWait time.Duration = 0
)

// DefaultRetention is the recommended Retention, and parent-worker's
// default (JETRUN_RETENTION): final runs are cleared a week after they
// finish. Config.Retention left zero keeps runs forever, as
// JETRUN_RETENTION=0 does.
const DefaultRetention = 7 * 24 * time.Hour

// orphanGrace is how old an index entry without a row must be before it is
// removed: a dispatcher creates the entry just before the row.
const orphanGrace = time.Minute

// leaderKey is the reconciler lease's key in the active bucket.
const leaderKey = "leader"

// Config configures a Reconciler. Zero values mean defaults.
type Config struct {
	// ID names this reconciler in the leader lease (default: random).
	ID string
	// Interval is the time between sweeps (default 5s). It is also the
	// leader lease's time to live (at least 1s): a standby takes over within
	// about 1⅓ intervals of the leader's death.
	Interval time.Duration
	// MaxBudget is a detached run's absolute budget when its dispatch sets
	// none (default 24h); negative: none.
	MaxBudget time.Duration
	// NoProgressBudget is a detached run's no-progress budget when its
	// dispatch sets none (default 1h); negative: none. It is armed by the
	// run's first chunk, progress or milestone.
	NoProgressBudget time.Duration
	// StartingGrace is how long a run may stay "starting" before the
	// reconciler checks its dispatch is still queued (default 30s).
	StartingGrace time.Duration
	// LeaseGrace is how long after its lease expired a running run is
	// checked for a dispatch that would wake a worker (default 30s).
	LeaseGrace time.Duration
	// MaxRedispatches bounds the re-dispatches of a run whose dispatch was
	// lost; then the run ends "error" with reason "dispatch-lost" (default 3).
	MaxRedispatches int
	// Retention is how long final, settled runs are kept before they are
	// cleared. Zero (the default) or negative keeps them forever, as
	// JETRUN_RETENTION=0 does; DefaultRetention (7 days) is the
	// recommended value and parent-worker's default.
	Retention time.Duration
	// RetentionEvery is how often retention runs (default: a tenth of
	// Retention, at least a second, at most an hour).
	RetentionEvery time.Duration
	// FinishUnservedAfter is how long an owed finish may wait without any
	// deliverer taking it before, if none follows its handler, the row
	// says so (finishes.<status>.unservedSince) and finish.unserved is
	// reported (default 1m).
	FinishUnservedAfter time.Duration
	// FinishUnservedWait is how long an owed finish may wait without any
	// deliverer taking it, none following its handler, before it is
	// dead-lettered to jetrun.dlq.finish.<handler> with the reason and
	// recorded as failed on the row (default 24h).
	FinishUnservedWait time.Duration
	// DispatchUnservedWait, when positive, is how long a dispatch may wait
	// in the dispatch stream with no worker taking its agent type (none
	// serves it, or none is running) before its run ends "error" (reason
	// no-worker) and the dispatch is moved to jetrun.dlq.<agentType> with
	// the reason. Zero (the default) lets it wait for a worker forever,
	// its row saying waiting-for-worker.
	DispatchUnservedWait time.Duration
	// HolderCheckEvery is how often each live worker is asked, in one
	// request, which of the running runs whose rows name it it no longer
	// executes; those are released and started again (holders.go; default
	// 1m).
	HolderCheckEvery time.Duration
	// MaxDepth bounds cancel cascades (default 8).
	MaxDepth int
	// Parallelism bounds the rows a sweep works on at once (default 16).
	Parallelism int
	// Logger receives logs (default: discard), among them the events
	// reconcile.begin, reconcile.leader, run.recovered, budget.exceeded,
	// run.cancelled, finish.unserved and finish.failed (obs.NewHandler
	// publishes them).
	Logger *slog.Logger
	// Observer, if set, is told of every sweep (for metrics).
	Observer Observer
}

// Observer is told what a Reconciler does, for metrics. Its methods must be
// quick and must not block.
type Observer interface {
	// Swept: a sweep ended, with err if it stopped early.
	Swept(st Stats, err error)
}

func (c Config) withDefaults() Config {
	if c.ID == "" {
		c.ID = "reconciler-" + strconv.FormatUint(rand.Uint64(), 36)
	}
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.MaxBudget = cmp.Or(c.MaxBudget, DefaultMaxBudget)
	c.NoProgressBudget = cmp.Or(c.NoProgressBudget, DefaultNoProgressBudget)
	c.StartingGrace = cmp.Or(c.StartingGrace, DefaultStartingGrace)
	c.LeaseGrace = cmp.Or(c.LeaseGrace, DefaultLeaseGrace)
	c.MaxRedispatches = cmp.Or(c.MaxRedispatches, DefaultMaxRedispatches)
	if c.RetentionEvery == 0 {
		c.RetentionEvery = min(max(c.Retention/10, time.Second), time.Hour)
	}
	c.FinishUnservedAfter = cmp.Or(c.FinishUnservedAfter, DefaultFinishUnservedAfter)
	c.FinishUnservedWait = cmp.Or(c.FinishUnservedWait, DefaultFinishUnservedWait)
	c.MaxDepth = cmp.Or(c.MaxDepth, events.DefaultMaxDepth)
	c.Parallelism = cmp.Or(c.Parallelism, DefaultParallelism)
	c.HolderCheckEvery = cmp.Or(c.HolderCheckEvery, DefaultHolderCheckEvery)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.ID != "" {
		if err := events.ValidateID(c.ID); err != nil {
			errs = append(errs, fmt.Errorf("reconciler id: %w", err))
		}
	}
	if c.Interval != 0 && c.Interval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("interval must be at least 10ms, got %s", c.Interval))
	}
	for name, d := range map[string]time.Duration{
		"starting grace": c.StartingGrace, "finish unserved after": c.FinishUnservedAfter,
		"finish unserved wait": c.FinishUnservedWait, "dispatch unserved wait": c.DispatchUnservedWait,
		"lease grace": c.LeaseGrace, "retention every": c.RetentionEvery, "holder check every": c.HolderCheckEvery,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	if c.MaxRedispatches < 0 || c.MaxDepth < 0 || c.Parallelism < 0 {
		errs = append(errs, errors.New("max redispatches, max depth and parallelism must not be negative"))
	}
	return errors.Join(errs...)
}

// Reconciler sweeps the active runs on a timer while it holds the leader
// lease. Create it with New, then Start; stop it with Shutdown or Stop.
type Reconciler struct {
	// TestSignals tell tests what the reconciler did (nil in production).
	TestSignals TestSignals

	cfg    Config
	policy model.Policy // what model.Due decides by, from cfg
	rt     *engine.Runtime
	js     jetstream.JetStream
	ns     wire.Namespace
	log    *slog.Logger
	store  *runstore.Store

	leader     atomic.Bool
	leaseUntil time.Time // end of our last successful renewal; owned by the loop goroutine
	logs       obs.Throttle

	mu       sync.Mutex
	watch    *runstore.ActiveWatch // the active-run index, followed while leading
	workers  *runstore.WorkerWatch // worker liveness, followed while leading
	finishes jetstream.Stream      // bound on first use
	paced    map[string]time.Time  // run+action → last time the action was taken (republishes)
	// budgetDue holds the runs whose budgets may run out before the next
	// sweep, and when (budgets.go).
	budgetDue      map[string]time.Time
	givenUpBetween int // runs given up by those looks since the last sweep

	life service.Lifecycle
}

// New returns a Reconciler on rt. It does no I/O: Start starts the timers,
// and Sweep can be called without Start.
func New(rt *engine.Runtime, cfg Config) (*Reconciler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("reconcile: config: %w", err)
	}
	cfg = cfg.withDefaults()
	r := &Reconciler{
		cfg: cfg, rt: rt, js: rt.JetStream(), ns: rt.Namespace(), store: rt.Store(),
		log: cfg.Logger.With("reconciler", cfg.ID), paced: make(map[string]time.Time),
	}
	r.policy = model.Policy{
		Interval: cfg.Interval, DedupWindow: r.republishEvery(),
		FinishUnservedAfter: cfg.FinishUnservedAfter, FinishUnservedWait: cfg.FinishUnservedWait,
		StartingGrace: cfg.StartingGrace, LeaseGrace: cfg.LeaseGrace, MaxRedispatches: cfg.MaxRedispatches,
		MaxBudget: cfg.MaxBudget, NoProgressBudget: cfg.NoProgressBudget,
	}
	return r, nil
}

// ID returns the reconciler's id, as written in the leader lease.
func (r *Reconciler) ID() string { return r.cfg.ID }

// IsLeader reports whether this reconciler holds the lease.
func (r *Reconciler) IsLeader() bool { return r.leader.Load() }

// Start starts the timers, until Shutdown or Stop, or until ctx ends (then
// as Stop).
func (r *Reconciler) Start(ctx context.Context) error {
	if err := r.life.Begin(); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.loop(runCtx)
	}()
	r.life.Running(ctx, func(ctx context.Context) error {
		cancel() // a sweep in progress ends at its next step
		select {
		case <-done:
		case <-ctx.Done():
			<-done
		}
		if r.leader.Load() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			r.resign(rctx) // a standby takes over at once
		}
		return nil
	})
	r.log.InfoContext(ctx, "reconciler started", "interval", r.cfg.Interval)
	return nil
}

// Shutdown stops the timers, waits for a sweep in progress, and gives the
// lease up so a standby takes over at once. It is idempotent and safe
// before Start.
func (r *Reconciler) Shutdown(ctx context.Context) error {
	defer r.dropWatch() // also started by direct Sweep calls
	return r.life.Shutdown(ctx)
}

// Stop is Shutdown without waiting for more than the sweep in progress.
func (r *Reconciler) Stop() error {
	defer r.dropWatch()
	return r.life.Stop()
}

// Stopped returns a channel closed once the reconciler has stopped.
func (r *Reconciler) Stopped() <-chan struct{} { return r.life.Stopped() }

// maxSweepPause is the longest pause after a failed sweep: the pauses grow
// from jsfault.InitialInterval while sweeps keep failing (JetStream away).
const maxSweepPause = 30 * time.Second

// fault logs a failed call at warn level, at most once per
// obs.DefaultLogEvery for each message and class of fault (jsfault), with
// the count of what was left out.
func (r *Reconciler) fault(ctx context.Context, msg string, err error, args ...any) {
	class := jsfault.Classify(ctx, err).String()
	r.logs.Log(ctx, r.log, slog.LevelWarn, msg+"/"+class, msg, append(args, "fault", class, "err", err)...)
}

func (r *Reconciler) loop(ctx context.Context) {
	lease := time.NewTicker(r.cfg.Interval / 3)
	defer lease.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	sweeps := make(chan struct{}, 1)
	wg.Go(func() { // the sweeper: never delays lease renewals
		nextRetention := time.Now().Add(r.cfg.RetentionEvery)
		var nextUnserved time.Time
		bo := jsfault.NewBackOff(maxSweepPause) // after a failed sweep; reset by one that succeeds
		budgets := time.NewTimer(r.cfg.Interval)
		defer budgets.Stop()
		for {
			var budgetsDue <-chan time.Time
			if d, ok := r.nextBudgetCheck(time.Now()); ok {
				budgets.Reset(d)
				budgetsDue = budgets.C
			}
			select {
			case <-ctx.Done():
				return
			case <-budgetsDue:
				r.checkBudgets(ctx)
				continue
			case <-sweeps:
			}
			if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
				r.fault(ctx, "sweep", err)
				_ = jsfault.Sleep(ctx, bo.NextBackOff())
				continue
			}
			bo.Reset()
			if time.Now().After(nextUnserved) {
				nextUnserved = time.Now().Add(max(r.cfg.Interval, minUnservedEvery))
				if _, err := r.markUnserved(ctx); err != nil && ctx.Err() == nil {
					r.fault(ctx, "look for dispatches no worker takes", err)
				}
			}
			if r.cfg.Retention > 0 && time.Now().After(nextRetention) {
				nextRetention = time.Now().Add(r.cfg.RetentionEvery)
				if n, err := r.Retain(ctx); err != nil && ctx.Err() == nil {
					r.fault(ctx, "retention", err)
				} else if n > 0 {
					r.log.InfoContext(ctx, "retention cleared runs", "count", n)
				}
			}
		}
	})
	lastSweep := time.Time{}
	for {
		r.lead(ctx)
		if r.leader.Load() && time.Since(lastSweep) >= r.cfg.Interval {
			lastSweep = time.Now()
			select {
			case sweeps <- struct{}{}:
			default: // a sweep is still running
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
		}
	}
}

// leaseTTL is the leader key's time to live: one interval, and at least the
// server's minimum of a second.
func (r *Reconciler) leaseTTL() time.Duration { return max(r.cfg.Interval, time.Second) }

// Leader returns the current holder of the reconciler lease and since when
// it holds it, or "" if none does.
func Leader(ctx context.Context, store *runstore.Store) (holder string, since time.Time, err error) {
	st, err := store.Lease(leaderKey).State(ctx)
	return st.Holder, st.Since, err
}

// lead takes or keeps the leader lease (runstore.Lease: a key whose time to live
// the server enforces). When the holder dies, the server removes the key
// one TTL after its last renewal and a standby's next Hold wins.
func (r *Reconciler) lead(ctx context.Context) {
	ttl := r.leaseTTL()
	held, err := r.store.Lease(leaderKey).Hold(ctx, r.cfg.ID, ttl)
	switch {
	case err == nil && held:
		r.leaseUntil = time.Now().Add(ttl)
		r.setLeader(ctx, true)
	case err == nil:
		r.setLeader(ctx, false) // someone else holds it until its TTL runs out
	default:
		if ctx.Err() == nil {
			r.fault(ctx, "reconciler lease", err)
		}
		if time.Now().After(r.leaseUntil) { // could not renew in time
			r.setLeader(ctx, false)
		}
	}
}

func (r *Reconciler) setLeader(ctx context.Context, on bool) {
	if r.leader.Swap(on) != on {
		if on {
			obs.Report(ctx, r.log, obs.LeaderAcquired, "")
		} else {
			r.log.InfoContext(ctx, "reconciler lease lost to another reconciler")
			r.dropWatch() // a standby need not follow the index
		}
	}
}

// activeWatch returns the watch of the active-run index, starting it on
// first use (it loads the index once, within ctx).
func (r *Reconciler) activeWatch(ctx context.Context) (*runstore.ActiveWatch, error) {
	r.mu.Lock()
	w := r.watch
	r.mu.Unlock()
	if w != nil {
		return w, nil
	}
	w, err := r.store.Index().Watch(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := r.store.Workers().Watch(ctx)
	if err != nil {
		w.Stop()
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watch != nil { // started concurrently
		w.Stop()
		ws.Stop()
		return r.watch, nil
	}
	r.watch, r.workers = w, ws
	return w, nil
}

// notifyCancel tells the worker holding row, if any, of its cancel request
// (wire.PublishCancel). A lost notice is published again by a later
// sweep.
func (r *Reconciler) notifyCancel(ctx context.Context, row *model.Row) {
	if row.Worker == "" || !row.CancelRequested {
		return
	}
	if err := wire.PublishCancelEvent(ctx, r.js, r.ns, row.CancelEvent(time.Now())); err != nil {
		r.fault(ctx, "publish cancel; a later sweep publishes it again", err, "run_id", row.ID)
	}
}

// holderAlive reports whether a live worker holds row, from the followed
// liveness keys (read directly when they are not followed).
func (r *Reconciler) holderAlive(ctx context.Context, row *model.Row) bool {
	r.mu.Lock()
	ws := r.workers
	r.mu.Unlock()
	if ws != nil {
		return ws.Alive(row)
	}
	alive, err := r.store.Workers().HolderAlive(ctx, row)
	return alive || err != nil // unsure: take it as held
}

func (r *Reconciler) dropWatch() {
	r.mu.Lock()
	w, ws := r.watch, r.workers
	r.watch, r.workers = nil, nil
	r.budgetDue = nil // the next leader's sweeps note them again
	r.mu.Unlock()
	if w != nil {
		w.Stop()
	}
	if ws != nil {
		ws.Stop()
	}
}

// resign gives the lease up.
func (r *Reconciler) resign(ctx context.Context) {
	if err := r.store.Lease(leaderKey).Release(ctx, r.cfg.ID); err == nil {
		r.leader.Store(false)
	}
}

// Stats describes one sweep.
type Stats struct {
	Active       int           // runs in the active index
	Unindexed    int           // settled runs (or orphan entries) removed from the index
	Republished  int           // finishes republished
	Unserved     int           // finishes found waiting for a handler nobody serves
	DeadLettered int           // finishes dead-lettered because nobody served their handler
	GivenUp      int           // runs interrupted for a budget (since the last sweep: see budgets.go)
	Recovered    int           // dispatches republished because the run's was lost
	Cancelled    int           // runs cancelled because their parent was
	Failed       int           // runs ended "error" because their dispatch was lost too often
	Released     int           // runs released because their live holder did not execute them
	Took         time.Duration // how long the sweep took
}

// Sweep reconciles every run in the active index once. The timer calls it
// while this reconciler leads; it can also be called directly (after Open;
// Stop then ends the index watch it starts).
func (r *Reconciler) Sweep(ctx context.Context) (Stats, error) {
	begin := time.Now()
	watch, err := r.activeWatch(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("reconcile: sweep: %w", err)
	}
	active := watch.Snapshot()
	st := &sweep{r: r, now: begin, watch: watch, parents: make(map[string]*model.Row)}
	obs.Debug(ctx, r.log, obs.ReconcileBegin, "", "active", len(active))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.Parallelism)
	for _, ir := range active {
		g.Go(func() error {
			err := st.run(gctx, ir)
			switch {
			case err == nil || gctx.Err() != nil:
			case jsfault.IsTransient(gctx, err):
				// JetStream is away or electing: every other run would
				// wait out the same fault. End the sweep; the loop backs
				// off and the next sweep takes every run up again.
				return fmt.Errorf("reconcile: sweep stopped at run %s: %w", ir.ID, err)
			default:
				r.fault(gctx, "reconcile run", err, "run_id", ir.ID)
			}
			return nil
		})
	}
	err = g.Wait()
	if err == nil {
		st.askHolders(ctx)
	}
	st.stats.Active = len(active)
	st.stats.Took = time.Since(begin)
	r.mu.Lock()
	st.stats.GivenUp += r.givenUpBetween
	r.givenUpBetween = 0
	r.mu.Unlock()
	r.prunePaced(begin)
	if r.cfg.Observer != nil {
		r.cfg.Observer.Swept(st.stats, cmp.Or(err, ctx.Err()))
	}
	r.TestSignals.Swept.Signal(st.stats)
	if err != nil && ctx.Err() == nil {
		return st.stats, err
	}
	return st.stats, ctx.Err()
}

// paceOK reports whether the action on key may be taken now, at most once
// per every; it records the action.
func (r *Reconciler) paceOK(key string, now time.Time, every time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.paced[key]; ok && now.Sub(last) < every {
		return false
	}
	r.paced[key] = now
	return true
}

func (r *Reconciler) prunePaced(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	horizon := 10 * max(r.cfg.StartingGrace, r.cfg.LeaseGrace, r.republishEvery())
	for k, t := range r.paced {
		if now.Sub(t) > horizon {
			delete(r.paced, k)
		}
	}
}

// republishEvery paces finish republishes: within the finish stream's dedup
// window a republish is a no-op anyway.
func (r *Reconciler) republishEvery() time.Duration {
	return cmp.Or(r.rt.Streams().DedupWindow, events.DefaultDedupWindow)
}
