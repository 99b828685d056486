package finish

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/service"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

// Defaults used where Config leaves a field zero.
const (
	DefaultMaxAttempts = 5
	DefaultTimeout     = 30 * time.Second
	DefaultRetryDelay  = time.Second
	DefaultConcurrency = 8
	// MaxRetryDelay caps the backoff between attempts.
	MaxRetryDelay = 5 * time.Minute
)

// Config configures a Deliverer. Zero values mean defaults.
type Config struct {
	// ID names this deliverer in delivery claims (default: random).
	ID string
	// MaxAttempts bounds handler invocations per finish (default 5); then
	// the finish is dead-lettered and the row records the failure. A
	// handler's jetruntype.Cancel dead-letters it at once.
	MaxAttempts int
	// Timeout bounds one handler invocation (default 30s). A deliverer that
	// dies mid-invocation leaves a claim that expires after it.
	Timeout time.Duration
	// RetryDelay is the wait before the second attempt; it doubles after
	// each failure, up to MaxRetryDelay (default 1s). A handler's
	// jetruntype.RetryAfter(err, d) waits d instead.
	RetryDelay time.Duration
	// Concurrency is how many finishes of one handler this process
	// delivers at once (default 8).
	Concurrency int
	// Logger receives logs (default: discard), among them the events
	// finish.delivered, finish.retry and finish.failed (obs.NewHandler
	// publishes them).
	Logger *slog.Logger
	// Observer, if set, is told of every delivery, failed attempt and
	// dead-lettered finish (for metrics).
	Observer Observer
	// Vouch, if set, is asked before a finish is delivered whether a
	// transition jetrun made owes it: a credential that may write rows
	// and events (the child's) can make a row and a status event say
	// anything. parent-worker vouches from its guard of the runs bucket,
	// which remembers each run's finishes as its transitions recorded
	// them (docs/operations.md, "What each role can do"). An error
	// wrapping ErrNotOwed refuses the finish: the handler is not called,
	// the row records the finish as given up (failedAt, lastError) and an
	// ERROR line says why; any other error retries the finish later.
	// Without it, the row is trusted. Either way a final status's finish
	// is delivered under one key only: a copy of a later ending of it
	// (<runId>.<status>.<n>) is refused.
	Vouch func(ctx context.Context, f Result) error
}

// ErrNotOwed is wrapped by a Config.Vouch error that refuses a finish: no
// transition jetrun made owes it.
var ErrNotOwed = errors.New("finish: no transition of jetrun owes this finish")

// Observer is told what a Deliverer does, for metrics. Its methods must be
// quick and must not block.
type Observer interface {
	// FinishDelivered: handler took a finish and it is marked delivered.
	FinishDelivered(handler string)
	// FinishFailed: one attempt of handler failed; it is retried.
	FinishFailed(handler string)
	// FinishDeadLettered: a finish for handler was given up and filed in
	// the dead-letter stream.
	FinishDeadLettered(handler string)
}

// Deliverer delivers finishes to registered handlers.
type Deliverer struct {
	cfg      Config
	rt       *engine.Runtime
	js       jetstream.JetStream
	ns       wire.Namespace
	log      *slog.Logger
	handlers map[string]Handler
	// milestones are the handlers registered with HandleMilestone.
	milestones map[string]MilestoneHandler
	listed     listedCache // per run, the milestone names it lists
	store      *runstore.Store
	logs       obs.Throttle // warnings about JetStream faults, per message and class

	life     service.Lifecycle
	mu       sync.Mutex
	started  bool // handlers can no longer be registered
	finisher *finisher
}

// validate reports every invalid field at once.
func (c Config) validate() error {
	var errs []error
	if c.ID != "" {
		if err := events.ValidateID(c.ID); err != nil {
			errs = append(errs, fmt.Errorf("deliverer id: %w", err))
		}
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("max attempts must not be negative, got %d", c.MaxAttempts))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout must not be negative, got %s", c.Timeout))
	}
	if c.RetryDelay < 0 {
		errs = append(errs, fmt.Errorf("retry delay must not be negative, got %s", c.RetryDelay))
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency must not be negative, got %d", c.Concurrency))
	}
	return errors.Join(errs...)
}

// New returns a Deliverer on rt. It does no I/O: Start creates the
// consumers.
func New(runtime *jetrun.Runtime, cfg Config) (*Deliverer, error) {
	rt := engine.From(runtime)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("finish: config: %w", err)
	}
	if cfg.ID == "" {
		cfg.ID = "deliverer-" + strconv.FormatUint(rand.Uint64(), 36)
	}
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, DefaultRetryDelay)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Deliverer{
		cfg: cfg, rt: rt, js: rt.JetStream(), ns: rt.Namespace(), store: rt.Store(),
		log:      cfg.Logger.With("deliverer", cfg.ID),
		handlers: make(map[string]Handler),
	}, nil
}

// Handle registers h for the finishes of handler name, the value of
// detached.onFinish that selects it (and for its milestone notices, if h is
// also a MilestoneHandler). It panics on an invalid or duplicate name, or
// after Start, like net/http's ServeMux.
func (d *Deliverer) Handle(name string, h Handler) {
	if err := events.ValidateToken("handler name", name); err != nil {
		panic("finish: Handle: " + err.Error())
	}
	if h == nil {
		panic("finish: Handle: nil handler for " + name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		panic("finish: Handle called after Start")
	}
	if prev, dup := d.handlers[name]; dup {
		if _, stand := prev.(noFinishHandler); !stand {
			panic("finish: Handle: a handler named " + name + " is already registered")
		}
	}
	d.handlers[name] = h
}

// HandleFunc registers f for the finishes of handler name; see Handle.
func (d *Deliverer) HandleFunc(name string, f func(ctx context.Context, run *jetruntype.Run, result Result) error) {
	d.Handle(name, HandlerFunc(f))
}

// handlerNames returns the registered handler names, sorted.
func (d *Deliverer) handlerNames() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.handlers))
}

// Start creates (or checks) one durable consumer per handler, then starts
// delivering until Shutdown or Stop, or until ctx ends (then as Stop). It also starts the finisher (see finisher.go), which
// publishes the finishes transitions owe, whatever their handler and
// wherever it is served: run at least one Deliverer (parent-worker does),
// with or without handlers, or finishes wait for the reconciler's
// republish.
func (d *Deliverer) Start(ctx context.Context) error {
	d.mu.Lock()
	if err := d.life.Begin(); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("finish: %w", err)
	}
	d.started = true
	d.mu.Unlock()
	ns := d.ns
	consumers := make(map[string]jetstream.Consumer, len(d.handlers))
	configs := make(map[string]jetstream.ConsumerConfig, len(d.handlers))
	for name := range d.handlers {
		cfg := jetstream.ConsumerConfig{
			Durable:       wire.FinishConsumer(name),
			Description:   "jetrun finish deliveries to handler " + name,
			FilterSubject: ns.FinishSubject(name),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       d.cfg.Timeout,
			MaxDeliver:    -1, // attempts are counted on the row, see Config.MaxAttempts
		}
		c, err := d.js.CreateOrUpdateConsumer(ctx, ns.FinishStream(), cfg)
		if err != nil {
			return fmt.Errorf("finish: create consumer for handler %s: %w", name, err)
		}
		consumers[name], configs[name] = c, cfg
	}
	p := service.NewPullers(ctx)
	runCtx := p.Context()
	if err := d.startFinisher(runCtx); err != nil {
		p.Drain(ctx)
		return err
	}
	stop := func(ctx context.Context) bool {
		d.finisher.stop()
		ok := p.Drain(ctx)
		d.finisher.wg.Wait() // its workers end with the handlers' context
		return ok
	}
	if len(d.handlers) == 0 {
		d.life.Running(ctx, func(ctx context.Context) error { stop(ctx); return nil })
		d.log.InfoContext(ctx, "finisher started; no finish handlers in this process")
		return nil
	}
	for name, c := range consumers {
		keep := d.keeper(ns.FinishStream(), configs[name], false) // a work queue: what was acked is gone
		p.Go(pull.Loop{
			Consumer: c, Concurrency: d.cfg.Concurrency,
			Handle: func(ctx context.Context, m jetstream.Msg, _ *pull.Slot) settle.Outcome {
				return d.deliver(ctx, name, m)
			},
			Stopped: retryLater,
			Logger:  d.log, Name: wire.FinishConsumer(name),
			Repair: keep.Repair, Keep: keep,
		})
	}
	if err := d.startNotices(ctx, p); err != nil {
		stop(ctx)
		return err
	}
	d.life.Running(ctx, func(ctx context.Context) error {
		// Late handlers see their context end; their finishes are retried.
		if !stop(ctx) {
			return fmt.Errorf("finish: deliveries did not return %s after their handlers were cancelled", service.Grace)
		}
		return nil
	})
	d.log.InfoContext(ctx, "finish deliverer started", "handlers", d.handlerNames())
	return nil
}

// Shutdown stops fetching and waits for deliveries in flight until ctx is
// done; then it cancels their handlers (those finishes are retried). It is
// idempotent and safe before Start.
func (d *Deliverer) Shutdown(ctx context.Context) error { return d.life.Shutdown(ctx) }

// Stop cancels deliveries in flight and stops.
func (d *Deliverer) Stop() error { return d.life.Stop() }

// Stopped returns a channel closed once the deliverer has stopped.
func (d *Deliverer) Stopped() <-chan struct{} { return d.life.Stopped() }

// keeper keeps the durable consumer cfg on stream (see pull.Keeper).
func (d *Deliverer) keeper(stream string, cfg jetstream.ConsumerConfig, resume bool) *pull.Keeper {
	k := &pull.Keeper{JS: d.js, Stream: stream, Config: cfg, Resume: resume, Ensure: d.rt.Repair, Logger: d.log}
	if r, ok := d.cfg.Observer.(pull.Restorer); ok {
		k.Restorer = r
	}
	return k
}
