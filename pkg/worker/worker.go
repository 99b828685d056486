package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrun/jetrun/internal/engine"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/budget"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/service"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

// Worker pulls dispatches for the agent types it has handlers for and
// executes them. Create it with New, register handlers with Handle, then
// Start it; stop it with Shutdown (graceful) or Stop (immediate hand-back).
type Worker struct {
	cfg      Config
	runtime  *jetrun.Runtime // for the parent client of nested runs
	rt       *engine.Runtime
	js       jetstream.JetStream
	ns       wire.Namespace
	store    *runstore.Store
	trees    *budget.Trees // charges usage to run trees and stops them past a budget
	log      *slog.Logger
	handlers map[string]Handler
	agents   agentSet // what the worker announces in the agent registry

	// Set by Start.
	eventWindow   atomic.Int64 // an attempt's events in flight at most (eventWindow), shared by its publishers
	signalsStream jetstream.Stream
	waiters       waiters                  // the Waits in progress
	streamEpoch   atomic.Value             // string: distinguishes dispatch stream incarnations in derived run ids
	ending        map[string]chan struct{} // per agent type, the attempts ending outside their slots (leaveSlot)

	liveUntil  atomic.Int64    // holdsUntil, in Unix nanoseconds
	troubleAt  atomic.Int64    // when a renewal of the liveness key last failed, in Unix nanoseconds (recovering)
	stopped    <-chan struct{} // closed when the worker stops its runs (set by Start)
	logs       obs.Throttle    // warnings about faults, per message and class
	nested     nested          // Run.Spawn's parent client (nested.go)
	lim        workerLimits    // the provider limits' Limiter (limits.go)
	holdWrites holdBatches     // reservation writes, batched per budget row (holdbatch.go)

	mu        sync.Mutex
	life      service.Lifecycle
	started   bool                  // handlers can no longer be registered
	live      *runstore.Liveness    // this process's liveness key
	lapsing   bool                  // the liveness key lapsed and is not back: claim nothing (heart.go)
	lapseDone chan struct{}         // closed when the lapse is over
	active    map[string]*execution // runs claimed or executing in this process
	awake     map[string]*execution // those of active the heart beats: not resting (rest.go)
	leftovers map[string]leftover   // attempts that ended without releasing their rows (leftovers.go)
	pullers   *service.Pullers      // the fetch loops and the runs they started; their contexts
	stopHeart context.CancelFunc
	cancels   jetstream.ConsumeContext
	signals   jetstream.ConsumeContext
	holds     *nats.Subscription // answers which runs this process executes (holding.go)
	beats     sync.WaitGroup
	shelving  atomic.Bool // waiting runs' dispatches are being shelved (shelf.go)
}

// New returns a Worker on rt. It does no I/O: Start creates the consumers.
func New(runtime *jetrun.Runtime, cfg Config) (*Worker, error) {
	rt := engine.From(runtime)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker: config: %w", err)
	}
	cfg = cfg.withDefaults()
	w := &Worker{
		cfg:      cfg,
		runtime:  runtime,
		rt:       rt,
		js:       rt.JetStream(),
		ns:       rt.Namespace(),
		store:    rt.Store(),
		trees:    budget.New(rt, cfg.MaxDepth, cfg.Logger.With("worker", cfg.ID)),
		log:      cfg.Logger.With("worker", cfg.ID),
		handlers: make(map[string]Handler),
		active:   make(map[string]*execution),
		awake:    make(map[string]*execution),
	}
	w.checkDedupWindow()
	return w, nil
}

// checkDedupWindow warns when an events stream forgets an event's
// Nats-Msg-Id sooner than the worker's lease: the worker re-sends an event
// after a fault for as long as its lease holds, and a copy that had landed
// before the window is stored twice (docs/leases.md, "Faults").
func (w *Worker) checkDedupWindow() {
	for _, s := range w.rt.EventsStreams() {
		info := s.CachedInfo()
		if info == nil || info.Config.Duplicates >= w.cfg.Lease {
			continue
		}
		w.log.Warn("an events stream forgets event ids sooner than this worker's lease ends: an event re-sent "+
			"after a fault that long may be stored twice; raise the stream's duplicate window "+
			"(JETRUN_EVENTS_DEDUP_WINDOW when the streams are created) to the lease or more",
			"stream", info.Config.Name, "dedup_window", info.Config.Duplicates, "lease", w.cfg.Lease)
		return
	}
}

// ID returns the worker's id, as written on the rows of the runs it holds.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers h for agentType. It panics if agentType is not a valid
// token, if a handler is already registered for it, or after Start, like
// net/http's ServeMux.
func (w *Worker) Handle(agentType string, h Handler) {
	if err := events.ValidateToken("agent type", agentType); err != nil {
		panic("worker: Handle: " + err.Error())
	}
	if h == nil {
		panic("worker: Handle: nil handler for " + agentType)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("worker: Handle called after Start")
	}
	if _, dup := w.handlers[agentType]; dup {
		panic("worker: Handle: a handler for " + agentType + " is already registered")
	}
	w.handlers[agentType] = h
}

// HandleFunc registers f for agentType; see Handle.
func (w *Worker) HandleFunc(agentType string, f func(ctx context.Context, run *Run) (Result, error)) {
	w.Handle(agentType, HandlerFunc(f))
}

// InFlight returns the number of runs this worker executes now.
func (w *Worker) InFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.active)
}

// AgentTypes returns the registered agent types, sorted.
func (w *Worker) AgentTypes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.handlers))
}

// Start creates (or checks) one durable consumer per agent type, then
// starts pulling. The worker runs until Shutdown or Stop, or until ctx ends
// (then as Stop: its runs are handed back at once; call Shutdown first for
// a graceful stop).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if len(w.handlers) == 0 {
		w.mu.Unlock()
		return errors.New("worker: no handlers registered")
	}
	if err := w.life.Begin(); err != nil {
		w.mu.Unlock()
		return fmt.Errorf("worker: %w", err)
	}
	w.started = true
	w.mu.Unlock()
	return w.setUp(ctx)
}

// setUp is Start after its checks.
func (w *Worker) setUp(ctx context.Context) error {
	ns := w.ns
	w.signalsStream = w.rt.SignalsStream()
	replicas := 1
	if info := w.rt.EventsStreams()[0].CachedInfo(); info != nil {
		replicas = info.Config.Replicas
	}
	w.eventWindow.Store(int64(eventWindow(replicas)))
	dispatch, err := w.js.Stream(ctx, ns.DispatchStream())
	if err != nil {
		return fmt.Errorf("worker: bind stream %s: %w", ns.DispatchStream(), err)
	}
	w.streamEpoch.Store(wire.StreamEpoch(dispatch.CachedInfo().Created))

	w.ending = make(map[string]chan struct{}, len(w.handlers))
	for agentType := range w.handlers {
		w.ending[agentType] = make(chan struct{}, w.cfg.Concurrency)
	}
	consumers := make(map[string]*dispatchConsumer, len(w.handlers))
	for agentType := range w.handlers {
		dc, err := w.bindConsumer(ctx, wire.AgentConsumerConfig(ns, agentType, w.cfg.Lease, w.cfg.FleetConcurrency))
		if err != nil {
			return fmt.Errorf("worker: consumer for agent type %s: %w", agentType, err)
		}
		consumers[agentType] = dc
	}
	malformed, err := w.bindConsumer(ctx, wire.MalformedConsumerConfig(ns))
	if err != nil {
		return err
	}

	acquiring := time.Now()
	live, err := w.store.Workers().Acquire(ctx, w.cfg.ID, w.cfg.Lease)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.renewed(acquiring)
	cancels, err := w.followCancels(ctx)
	if err != nil {
		return err
	}
	signals, err := w.followSignals(ctx)
	if err != nil {
		cancels.Stop()
		return err
	}
	holds, err := w.answerHolds()
	if err != nil {
		cancels.Stop()
		signals.Stop()
		return fmt.Errorf("worker: %w", err)
	}

	p := service.NewPullers(ctx)
	runCtx := p.Context()
	heartCtx, stopHeart := context.WithCancel(context.WithoutCancel(ctx))
	w.mu.Lock()
	w.pullers, w.stopHeart = p, stopHeart
	w.stopped = runCtx.Done()
	w.live, w.cancels, w.signals, w.holds = live, cancels, signals, holds
	w.mu.Unlock()
	w.announce(ctx)
	w.beats.Go(func() { w.heart(heartCtx) })
	w.beats.Go(func() { w.announceLoop(heartCtx) })
	w.beats.Go(func() { w.keepShelves(heartCtx) })
	nak := func(jetstream.Msg) settle.Outcome { return settle.Retry(0) } // stopping: straight to another worker
	loops := []pull.Loop{{
		Consumer: malformed.c, Concurrency: 1, Stopped: nak,
		Handle: func(ctx context.Context, m jetstream.Msg, _ *pull.Slot) settle.Outcome {
			return w.deadLetterMalformed(ctx, m)
		},
		Logger: w.log, Name: wire.MalformedConsumer, Repair: w.repair(malformed), Keep: malformed.keep,
	}}
	for agentType, dc := range consumers {
		loops = append(loops, pull.Loop{
			Consumer: dc.c, Concurrency: w.cfg.Concurrency, Stopped: nak,
			Handle: func(ctx context.Context, m jetstream.Msg, slot *pull.Slot) settle.Outcome {
				return w.process(ctx, agentType, m, slot)
			},
			Logger: w.log, Name: wire.AgentConsumer(agentType), Repair: w.repair(dc), Keep: dc.keep,
		})
	}
	for _, l := range loops {
		p.Go(l)
	}
	w.life.Running(ctx, w.drain)
	w.log.InfoContext(ctx, "worker started", "agent_types", w.AgentTypes(), "concurrency", w.cfg.Concurrency,
		"lease", w.cfg.Lease)
	return nil
}

// Shutdown stops pulling new dispatches and waits for the runs in flight to
// finish. When ctx is done first, it cancels their handlers (cause
// ErrShuttingDown) and hands their runs back, so another worker takes them at
// once instead of after a lease. It is idempotent and safe before Start.
func (w *Worker) Shutdown(ctx context.Context) error { return w.life.Shutdown(ctx) }

// Stop hands every run in flight back at once and stops the worker.
func (w *Worker) Stop() error { return w.life.Stop() }

// Stopped returns a channel closed once the worker has stopped.
func (w *Worker) Stopped() <-chan struct{} { return w.life.Stopped() }

// drain is the worker's graceful stop (see Shutdown).
func (w *Worker) drain(ctx context.Context) error {
	w.mu.Lock()
	p := w.pullers
	w.mu.Unlock()

	defer w.stopBookkeeping()
	// Every handler context ends with the worker (cause ErrShuttingDown);
	// when ctx ends first, the runs in flight are handed back.
	p.OnForce(ErrShuttingDown, func() {
		w.log.WarnContext(ctx, "shutdown timeout: handing runs in flight back", "runs", w.activeIDs())
	})
	if !p.Drain(ctx) {
		return fmt.Errorf("worker: runs %v did not return %s after their handlers were cancelled",
			w.activeIDs(), service.Grace)
	}
	return nil
}

// stopBookkeeping stops the heart and the cancel and signal consumers and releases the
// liveness key, so runs not handed back are taken over at once.
func (w *Worker) stopBookkeeping() {
	w.mu.Lock()
	stopHeart, cancels, signals, holds, live := w.stopHeart, w.cancels, w.signals, w.holds, w.live
	w.mu.Unlock()
	stopHeart()
	w.beats.Wait()
	cancels.Stop()
	signals.Stop()
	_ = holds.Unsubscribe() // fails only on a closed connection
	ctx, cancel := writeContext()
	defer cancel()
	w.withdraw(ctx)
	if err := live.Release(ctx); err != nil {
		w.log.WarnContext(ctx, "release worker liveness; its runs are taken over when it expires", "err", err)
	}
	w.stopLimiter(ctx)
}

// register enters e, a run about to be claimed, in the active set; false if
// the run is already being claimed or executed here, its row is being
// released (leftovers.go), or while the worker's liveness has lapsed (it
// claims nothing until it is back). A run left behind here is claimed
// afresh: the claim reads its row and decides.
func (w *Worker) register(e *execution) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.active[e.id]; dup || w.lapsing || w.leftovers[e.id].releasing {
		return false
	}
	w.active[e.id] = e
	w.awake[e.id] = e
	delete(w.leftovers, e.id)
	return true
}

func (w *Worker) unregister(e *execution) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active[e.id] == e {
		delete(w.active, e.id)
		delete(w.awake, e.id)
	}
	e.releaseLimits() // a leaf lock: a run's grants go back however its attempt ended
}

// epoch is the epoch of the worker's liveness key, written on claimed rows.
func (w *Worker) epoch() string { return w.liveness().Epoch() }

func (w *Worker) activeIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.active))
}
