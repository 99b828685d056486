package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/jspub"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Config says where a Runtime's streams and buckets are and how they are
// created: package jetrun's Config, validated there.
type Config struct {
	Namespace wire.Namespace
	Streams   events.StreamOptions
}

// The runtime's pipelined publishes (a worker's events, a parent's
// dispatches): how many may be in flight on the connection, and how long
// one waits for its answer before it counts as a transient fault.
const (
	asyncMaxPending = 16 << 10
	asyncAckTimeout = 5 * time.Second
)

// RepairEvery bounds how often Repair re-creates what is missing.
const RepairEvery = 5 * time.Second

// Runtime is jetrun's JetStream resources in one namespace, shared by the
// roles of a process, and the writers several roles share. It is safe for
// concurrent use. Users hold it as a jetrun.Runtime; the roles reach it
// with From.
type Runtime struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	pub      *jspub.Publisher // waits for the answers on a run's path: row reads and writes, status events, finishes, dispatches
	cfg      Config
	store    *runstore.Store
	dispatch jetstream.Stream   // bound once, by name
	events   []jetstream.Stream // one per partition (wire.Partition)
	signals  jetstream.Stream
	asks     *asks.Store

	lastRepair atomic.Int64 // when Repair last ran, in Unix nanoseconds
}

// Open creates (or checks) jetrun's streams and buckets in cfg.Namespace on
// nc and binds them. The connection stays the caller's: nothing in jetrun
// closes it; the runtime's reply subscriptions (jspub's, and jetstream's
// for pipelined publishes) end with it.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Runtime, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(asyncMaxPending),
		jetstream.WithPublishAsyncTimeout(asyncAckTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetrun: jetstream: %w", err)
	}
	ns := cfg.Namespace
	if cfg.Streams, err = wire.ResolveEventsStreams(ctx, js, ns, cfg.Streams); err != nil {
		return nil, fmt.Errorf("jetrun: %w", err)
	}
	if err := wire.EnsureStreams(ctx, js, ns, cfg.Streams); err != nil {
		return nil, fmt.Errorf("jetrun: %w", err)
	}
	pub, err := jspub.New(js)
	if err != nil {
		return nil, fmt.Errorf("jetrun: %w", err)
	}
	store, err := runstore.Open(ctx, js, runstore.Config{Namespace: ns, Replicas: cfg.Streams.Replicas, Publisher: pub})
	if err != nil {
		_ = pub.Close()
		return nil, fmt.Errorf("jetrun: %w", err)
	}
	rt := &Runtime{nc: nc, js: js, pub: pub, cfg: cfg, store: store}
	if err := rt.bind(ctx); err != nil {
		_ = pub.Close()
		return nil, err
	}
	if rt.asks, err = asks.Open(ctx, js, ns, cfg.Streams.Replicas); err != nil {
		_ = pub.Close()
		return nil, fmt.Errorf("jetrun: %w", err)
	}
	return rt, nil
}

// bind binds the runtime's streams.
func (rt *Runtime) bind(ctx context.Context) error {
	ns, js := rt.cfg.Namespace, rt.js
	var err error
	if rt.dispatch, err = js.Stream(ctx, ns.DispatchStream()); err != nil {
		return fmt.Errorf("jetrun: bind stream %s: %w", ns.DispatchStream(), err)
	}
	for _, name := range ns.EventsStreams(rt.cfg.Streams.EventsStreams) {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("jetrun: bind stream %s: %w", name, err)
		}
		rt.events = append(rt.events, s)
	}
	wire.RememberEventsStreams(js, ns, len(rt.events))
	if rt.signals, err = js.Stream(ctx, ns.SignalsStream()); err != nil {
		return fmt.Errorf("jetrun: bind stream %s: %w", ns.SignalsStream(), err)
	}
	return nil
}

// Conn returns the NATS connection the runtime was opened on.
func (rt *Runtime) Conn() *nats.Conn { return rt.nc }

// JetStream returns the runtime's JetStream context.
func (rt *Runtime) JetStream() jetstream.JetStream { return rt.js }

// Namespace returns the runtime's namespace.
func (rt *Runtime) Namespace() wire.Namespace { return rt.cfg.Namespace }

// Streams returns the stream options the runtime creates streams with.
func (rt *Runtime) Streams() events.StreamOptions { return rt.cfg.Streams }

// Store returns the run row store.
func (rt *Runtime) Store() *runstore.Store { return rt.store }

// DispatchStream returns the dispatch stream, bound at Open (by name: it
// still answers for a stream re-created since, but its CachedInfo is
// Open's).
func (rt *Runtime) DispatchStream() jetstream.Stream { return rt.dispatch }

// EventsStreams returns the run events streams, bound at Open, in partition
// order: one unless the namespace spreads events over several
// (events.StreamOptions.EventsStreams).
func (rt *Runtime) EventsStreams() []jetstream.Stream { return rt.events }

// EventsStreamNames returns the names of the events streams, partition
// order.
func (rt *Runtime) EventsStreamNames() []string {
	return rt.cfg.Namespace.EventsStreams(len(rt.events))
}

// EventsStreamFor returns the events stream holding run id's events.
func (rt *Runtime) EventsStreamFor(runID string) jetstream.Stream {
	return rt.events[wire.Partition(runID, len(rt.events))]
}

// EventSubject is the subject a writer publishes event kind of run id on
// (wire.Namespace.EventSubject): the documented one with one events stream.
func (rt *Runtime) EventSubject(runID, kind string) string {
	return rt.cfg.Namespace.EventSubject(runID, kind, len(rt.events))
}

// Asks returns the store of the asks (what runs wait on people for).
func (rt *Runtime) Asks() *asks.Store { return rt.asks }

// SignalsStream returns the signals stream, bound at Open.
func (rt *Runtime) SignalsStream() jetstream.Stream { return rt.signals }

// Repair re-creates the streams and buckets that are missing, as Open does
// (what exists is left as it is), at most once every RepairEvery across the
// process's roles: an operator's delete, or a stream lost with its node,
// costs a few seconds of retries, not the runs. It returns nil without I/O
// when another repair ran within RepairEvery. It waits at most RepairEvery.
func (rt *Runtime) Repair(ctx context.Context) error {
	now := time.Now().UnixNano()
	last := rt.lastRepair.Load()
	if now-last < int64(RepairEvery) || !rt.lastRepair.CompareAndSwap(last, now) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, RepairEvery)
	defer cancel()
	ns := rt.cfg.Namespace
	if err := wire.RepairStreams(ctx, rt.js, ns, rt.cfg.Streams); err != nil {
		return fmt.Errorf("jetrun: repair: %w", err)
	}
	if _, err := runstore.Open(ctx, rt.js, runstore.Config{Namespace: ns, Replicas: rt.cfg.Streams.Replicas, Publisher: rt.pub}); err != nil {
		return fmt.Errorf("jetrun: repair: %w", err)
	}
	return nil
}

// Public is what From accepts: a *jetrun.Runtime (whose Namespace is an
// events.Namespace, so an engine Runtime cannot be passed by mistake).
type Public interface {
	Namespace() events.Namespace
}

// from unwraps a public jetrun.Runtime; package jetrun sets it at init.
var from func(rt Public) *Runtime

// SetFrom is called once, by package jetrun's init, with the function that
// unwraps its Runtime.
func SetFrom(f func(rt Public) *Runtime) { from = f }

// From returns the engine behind rt, a *jetrun.Runtime.
func From(rt Public) *Runtime { return from(rt) }

// Resume resumes the run of row, given up (interrupted) with its child
// stopped, as a new attempt (model.Resumed): "starting", or with
// queued "queued" for its concurrency key. A run the active-run index
// lists (every run not Unindexed) is entered in it again, since its
// entries went when its give-up settled: before the row moves, so a
// resumer that dies right after leaves one, and after, in case someone who
// read the row settled purged them meanwhile (runstore.Store.Unindex). So a
// resumed run is swept again like any live run: budgets, lost dispatches,
// owed finishes, cancel cascades. resumed is false when another caller
// resumed it first or it is not resumable; next is then the row as it is.
// The caller publishes the dispatch (a keyed run waits for its key).
func (rt *Runtime) Resume(ctx context.Context, row *model.Row, queued bool) (next *model.Row, resumed bool, err error) {
	if err := rt.store.Index().Reindex(ctx, row); err != nil {
		return nil, false, fmt.Errorf("jetrun: resume run %s: %w", row.ID, err)
	}
	now := time.Now()
	next, _, err = rt.store.Mutate(ctx, row.ID, func(r *model.Row) error {
		resumed = false
		if err := model.Apply(r, model.Resumed{Queued: queued}, now); err != nil {
			return err // runstore.ErrNoChange: not resumable, or resumed already
		}
		resumed = true
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("jetrun: resume run %s: %w", row.ID, err)
	}
	if resumed {
		if err := rt.store.Index().Reindex(ctx, next); err != nil {
			return nil, false, fmt.Errorf("jetrun: resume run %s: %w", row.ID, err)
		}
	}
	return next, resumed, nil
}
