// Package reconcile runs jetrun's reconciler in your own process: the
// timer-driven repair that a parent-worker runs, and that a program
// embedding jetrun's parent, worker and finish packages needs as well. It
//
//   - ends the detached runs past their budgets (absolute, or without
//     progress) as interrupted, and asks their workers to stop;
//   - publishes again the dispatch of a run whose dispatch or worker was
//     lost, so the run starts (again) elsewhere;
//   - completes cancel cascades that a crash interrupted;
//   - publishes again every finish owed and not delivered, so a detached
//     run's finish handler hears its end at least once, and reports (then
//     dead-letters) finishes no deliverer serves;
//   - clears final runs older than the retention.
//
// Invariants:
//   - One reconciler is active at a time across every process of a
//     namespace, through a lease: the others stand by and take over within
//     about 1⅓ intervals of the leader's end (at once after its Shutdown).
//     Correctness never depends on it: every change is a compare-and-set on
//     the run's row, so two reconcilers, or one racing a worker, cannot both
//     win a transition.
//   - A sweep's cost grows with the runs that are not settled, not with the
//     runs retained.
//   - interrupted is soft: a child that finishes anyway replaces it with
//     its real result. Awaited runs are never given up by the reconciler:
//     only detached runs have budgets.
//
// A Reconciler has the lifecycle of the other long-running services
// (Start, Shutdown, Stop, Stopped).
package reconcile

import (
	"context"
	"log/slog"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

// Defaults used where Config leaves a field zero.
const (
	DefaultInterval         = reconcile.DefaultInterval
	DefaultMaxBudget        = reconcile.DefaultMaxBudget
	DefaultNoProgressBudget = reconcile.DefaultNoProgressBudget
	DefaultMaxRedispatches  = reconcile.DefaultMaxRedispatches
	// DefaultFinishUnservedWait is how long an owed finish may wait with
	// no deliverer serving its handler before it is dead-lettered.
	DefaultFinishUnservedWait = reconcile.DefaultFinishUnservedWait
)

// DefaultRetention is the recommended [Config.Retention], and
// parent-worker's default (JETRUN_RETENTION): final runs are cleared a week
// after they finish. Config.Retention left zero keeps runs forever.
const DefaultRetention = reconcile.DefaultRetention

// Config configures a [Reconciler]. Zero values mean defaults.
type Config struct {
	// ID names this reconciler in the leader lease (default: random).
	ID string
	// Interval is the time between sweeps (default [DefaultInterval]). It
	// is also the leader lease's time to live (at least 1s).
	Interval time.Duration
	// MaxBudget is a detached run's absolute budget when its dispatch sets
	// none (default [DefaultMaxBudget]); negative: none.
	MaxBudget time.Duration
	// NoProgressBudget is a detached run's budget without a sign of
	// progress when its dispatch sets none (default
	// [DefaultNoProgressBudget]); negative: none. It is armed by the run's
	// first chunk, progress or milestone; waiting for a signal is not
	// "no progress".
	NoProgressBudget time.Duration
	// MaxRedispatches bounds the dispatches published again for a run whose
	// dispatch was lost; then the run ends "error" with reason
	// "dispatch-lost" (default [DefaultMaxRedispatches]).
	MaxRedispatches int
	// Retention is how long final runs are kept after they finish before
	// they are cleared (their events, rows and index entries). Zero or
	// negative keeps them forever; [DefaultRetention] is the recommended
	// value.
	Retention time.Duration
	// FinishUnservedWait is how long an owed finish may wait with no
	// deliverer serving its handler before it is moved to the dead-letter
	// stream (jetrun.dlq.finish.<handler>) and recorded as failed on the
	// row (default [DefaultFinishUnservedWait]).
	FinishUnservedWait time.Duration
	// DispatchUnservedWait, when positive, is how long a dispatch may wait
	// with no worker taking its agent type before its run ends "error"
	// (reason "no-worker") and the dispatch is dead-lettered. Zero (the
	// default) lets it wait for a worker for ever.
	DispatchUnservedWait time.Duration
	// MaxDepth bounds cancel cascades (default 8, as the parent's).
	MaxDepth int
	// Logger receives logs (default: discard).
	Logger *slog.Logger
	// Observer, if set, is told of every sweep (for metrics).
	Observer Observer
}

// Observer is told what a [Reconciler] does, for metrics. Its methods must
// be quick and must not block.
type Observer interface {
	// Swept: a sweep ended, with err if it stopped early.
	Swept(st Stats, err error)
}

// Stats describes one sweep: the runs it looked at and what it did.
type Stats struct {
	Active       int           // runs not settled yet, the sweep's work
	Unindexed    int           // settled runs the sweep stopped tracking
	Republished  int           // owed finishes published again
	Unserved     int           // owed finishes found waiting for a handler no deliverer serves
	DeadLettered int           // owed finishes dead-lettered after FinishUnservedWait
	GivenUp      int           // detached runs ended interrupted for a budget
	Recovered    int           // dispatches published again because the run's was lost
	Cancelled    int           // runs cancelled because their parent was
	Failed       int           // runs ended "error" because their dispatch was lost too often
	Released     int           // runs released because the live worker named on them did not run them
	Took         time.Duration // how long the sweep took
}

// Reconciler sweeps the runs on a timer while it leads. Create it with
// [New], then [Reconciler.Start]; stop it with [Reconciler.Shutdown] or
// [Reconciler.Stop].
type Reconciler struct {
	r *reconcile.Reconciler
}

// New returns a Reconciler on rt. It does no I/O: Start starts the timers.
func New(rt *jetrun.Runtime, cfg Config) (*Reconciler, error) {
	icfg := reconcile.Config{
		ID:                   cfg.ID,
		Interval:             cfg.Interval,
		MaxBudget:            cfg.MaxBudget,
		NoProgressBudget:     cfg.NoProgressBudget,
		MaxRedispatches:      cfg.MaxRedispatches,
		Retention:            cfg.Retention,
		FinishUnservedWait:   cfg.FinishUnservedWait,
		DispatchUnservedWait: cfg.DispatchUnservedWait,
		MaxDepth:             cfg.MaxDepth,
		Logger:               cfg.Logger,
	}
	if cfg.Observer != nil {
		icfg.Observer = observer{cfg.Observer}
	}
	r, err := reconcile.New(engine.From(rt), icfg)
	if err != nil {
		return nil, err // "reconcile: config: …"
	}
	return &Reconciler{r: r}, nil
}

// Start starts the timers: the reconciler stands by for the lease and,
// once it leads, sweeps every Interval, until Shutdown or Stop, or until
// ctx ends (then as Stop).
func (r *Reconciler) Start(ctx context.Context) error { return r.r.Start(ctx) }

// Shutdown stops the timers, waits for a sweep in progress until ctx ends,
// and gives the lease up so a standby takes over at once. It is idempotent
// and safe before Start.
func (r *Reconciler) Shutdown(ctx context.Context) error { return r.r.Shutdown(ctx) }

// Stop is Shutdown without waiting for more than the step of the sweep in
// progress.
func (r *Reconciler) Stop() error { return r.r.Stop() }

// Stopped returns a channel closed once the reconciler has stopped.
func (r *Reconciler) Stopped() <-chan struct{} { return r.r.Stopped() }

// observer tells o what the engine's reconciler reports.
type observer struct{ o Observer }

func (w observer) Swept(st reconcile.Stats, err error) {
	w.o.Swept(Stats{
		Active: st.Active, Unindexed: st.Unindexed, Republished: st.Republished, Unserved: st.Unserved,
		DeadLettered: st.DeadLettered, GivenUp: st.GivenUp, Recovered: st.Recovered, Cancelled: st.Cancelled,
		Failed: st.Failed, Released: st.Released, Took: st.Took,
	}, err)
}
