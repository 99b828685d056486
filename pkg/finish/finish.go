// Package finish delivers the finishes of detached runs to named handlers.
//
// A detached run dispatched with detached.onFinish = "<handler>" owes one
// finish per status it reaches among completed, error, aborted and the
// give-up interrupted. Each transition records the owed finish on the run's
// row (its delivery ledger) and says so on its status event (header
// Jetrun-Finish-Owed); the finisher every Deliverer runs (finisher.go)
// publishes it to jetrun.finish.<handler> with Nats-Msg-Id
// <runId>.<status>, and the reconciler republishes any that were lost. A
// program that runs pkg/worker without parent-worker must run a Deliverer
// (with or without handlers) for finishes to be published promptly.
//
// A Deliverer runs one durable consumer per handler (finish-<handler>),
// shared by every process that registers the handler. For each message it:
//
//  1. reads the row and acknowledges at once if the finish was delivered,
//     given up, or the run is gone;
//  2. claims the delivery with a compare-and-set on the row (attempts + 1,
//     claimed until now + Timeout), so two deliverers never invoke a handler
//     for the same finish at the same time;
//  3. invokes the handler, heartbeating the message while it runs;
//  4. on success marks delivered[status] with a compare-and-set, then acks;
//     on failure records the error and retries with exponential backoff
//     (NakWithDelay), and after MaxAttempts files the finish in the
//     dead-letter stream, records the failure on the row and stops.
//
// Delivery is therefore exactly once on the happy path and at least once
// under a crash: a deliverer that dies after the handler's side effect but
// before marking it delivered leaves a claim that expires, and the finish is
// delivered again. Handlers must be idempotent; Result's IdempotencyKey
// (<runId>.<status>) is the key to deduplicate on.
//
// Milestone notices (detached.onMilestones) travel the same way, on the
// same subject and consumer, with their own ledger slot per milestone name
// (kv.Run.Notices) and the key <runId>.milestone.<name>; a deliverer also
// records them from the run's milestones and sends them before the run's
// finish. See notice.go and docs/delivery.md.
package finish

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jsfault"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/obs"
	"github.com/jetrun/jetrun/pkg/pull"
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

// Result is what a finish handler receives: the outcome for one status.
type Result = events.Finish

// IdempotencyKey is the key a handler deduplicates on: <runId>.<status>,
// the finish's Nats-Msg-Id.
func IdempotencyKey(r Result) string { return events.FinishMsgID(r.RunID, r.Status) }

// Handler handles finishes. A returned error (or a panic, or running past
// Config.Timeout) is a failed attempt, retried with backoff.
type Handler interface {
	HandleFinish(ctx context.Context, run *kv.Run, result Result) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, run *kv.Run, result Result) error

// HandleFinish calls f.
func (f HandlerFunc) HandleFinish(ctx context.Context, run *kv.Run, result Result) error {
	return f(ctx, run, result)
}

// Config configures a Deliverer. Zero values mean defaults.
type Config struct {
	// ID names this deliverer in delivery claims (default: random).
	ID string
	// Namespace is the subject prefix (default "jetrun").
	Namespace events.Namespace
	// Streams tunes the streams and buckets when this deliverer creates them.
	Streams events.StreamOptions
	// MaxAttempts bounds handler invocations per finish (default 5); then
	// the finish is dead-lettered and the row records the failure.
	MaxAttempts int
	// Timeout bounds one handler invocation (default 30s). A deliverer that
	// dies mid-invocation leaves a claim that expires after it.
	Timeout time.Duration
	// RetryDelay is the wait before the second attempt; it doubles after
	// each failure, up to MaxRetryDelay (default 1s).
	RetryDelay time.Duration
	// Concurrency is how many finishes of one handler this process
	// delivers at once (default 8).
	Concurrency int
	// Logger receives logs (default: discard).
	Logger *slog.Logger
	// Reporter receives finish.delivered / finish.retry / finish.failed.
	Reporter *obs.Reporter
	// Observer, if set, is told of every delivery, failed attempt and
	// dead-lettered finish (for metrics).
	Observer Observer
}

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
	js       jetstream.JetStream
	log      *slog.Logger
	obs      *obs.Reporter
	handlers map[string]Handler
	// milestones are the handlers registered with HandleMilestone.
	milestones map[string]MilestoneHandler
	listed     listedCache // per run, the milestone names it lists
	store      *kv.Store
	logs       obs.Throttle // warnings about JetStream faults, per message and class

	mu       sync.Mutex
	started  bool
	stopped  bool
	stopPull context.CancelFunc
	cancel   context.CancelFunc
	pullers  sync.WaitGroup
	inflight sync.WaitGroup
	finisher *finisher
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
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
	if err := c.Streams.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// New returns a Deliverer using nc.
func New(nc *nats.Conn, cfg Config) (*Deliverer, error) {
	if err := cfg.Validate(); err != nil {
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
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("finish: jetstream: %w", err)
	}
	return &Deliverer{
		cfg: cfg, js: js, log: cfg.Logger.With("deliverer", cfg.ID),
		obs: cfg.Reporter, handlers: make(map[string]Handler),
	}, nil
}

// HandleFinish registers h under name, the value of detached.onFinish that
// selects it. It panics on an invalid or duplicate name, or after Start.
func (d *Deliverer) HandleFinish(name string, h Handler) {
	if err := events.ValidateHandler(name); err != nil {
		panic("finish: HandleFinish: " + err.Error())
	}
	if h == nil {
		panic("finish: HandleFinish: nil handler for " + name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		panic("finish: HandleFinish called after Start")
	}
	if prev, dup := d.handlers[name]; dup {
		if _, stand := prev.(noFinishHandler); !stand {
			panic("finish: HandleFinish: a handler named " + name + " is already registered")
		}
	}
	d.handlers[name] = h
}

// HandleFinishFunc registers f under name; see HandleFinish.
func (d *Deliverer) HandleFinishFunc(name string, f func(ctx context.Context, run *kv.Run, result Result) error) {
	d.HandleFinish(name, HandlerFunc(f))
}

// Handlers returns the registered handler names, sorted.
func (d *Deliverer) Handlers() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.handlers))
}

// ensureStreams re-creates the streams the deliverer uses, as at Start.
func (d *Deliverer) ensureStreams(ctx context.Context) error {
	return events.EnsureStreams(ctx, d.js, d.cfg.Namespace, d.cfg.Streams)
}

// Start creates (or checks) the streams and one durable consumer per
// handler, then starts delivering. ctx bounds the set-up only. It also
// starts the finisher (see finisher.go), which publishes the finishes
// transitions owe, whatever their handler and wherever it is served: run
// at least one Deliverer (parent-worker does), with or without handlers,
// or finishes wait for the reconciler's republish.
func (d *Deliverer) Start(ctx context.Context) error {
	d.mu.Lock()
	if d.started {
		d.mu.Unlock()
		return errors.New("finish: already started")
	}
	d.started = true
	d.mu.Unlock()
	ns := d.cfg.Namespace
	if err := events.EnsureStreams(ctx, d.js, ns, d.cfg.Streams); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	store, err := kv.Open(ctx, d.js, kv.Config{Namespace: ns, Replicas: d.cfg.Streams.Replicas})
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	d.store = store
	consumers := make(map[string]jetstream.Consumer, len(d.handlers))
	configs := make(map[string]jetstream.ConsumerConfig, len(d.handlers))
	for name := range d.handlers {
		cfg := jetstream.ConsumerConfig{
			Durable:       events.FinishConsumer(name),
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
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pullCtx, stopPull := context.WithCancel(runCtx)
	d.mu.Lock()
	d.cancel, d.stopPull = cancel, stopPull
	d.mu.Unlock()
	if err := d.startFinisher(runCtx); err != nil {
		stopPull()
		cancel()
		return err
	}
	if len(d.handlers) == 0 {
		d.log.InfoContext(ctx, "finisher started; no finish handlers in this process")
		return nil
	}
	for name, c := range consumers {
		loop := pull.Loop{
			Consumer: c, Concurrency: d.cfg.Concurrency, Handlers: &d.inflight,
			Handle:  func(m jetstream.Msg, _ *pull.Slot) { d.deliver(runCtx, name, m) },
			Stopped: func(m jetstream.Msg) { _ = m.NakWithDelay(time.Second) },
			Logger:  d.log, Name: events.FinishConsumer(name),
			Repair: pull.Recreate(d.js, d.ensureStreams, ns.FinishStream(), configs[name]),
		}
		d.pullers.Go(func() { loop.Run(pullCtx) })
	}
	if err := d.startNotices(ctx, runCtx, pullCtx); err != nil {
		d.finisher.stop()
		stopPull()
		d.pullers.Wait()
		cancel()
		return err
	}
	d.log.InfoContext(ctx, "finish deliverer started", "handlers", d.Handlers())
	return nil
}

// Shutdown stops fetching and waits for deliveries in flight until ctx is
// done; then it cancels their handlers (those finishes are retried). It is
// idempotent and safe before Start.
func (d *Deliverer) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	if d.stopped || d.stopPull == nil {
		d.stopped = true
		d.mu.Unlock()
		return nil
	}
	d.stopped = true
	stopPull, cancel := d.stopPull, d.cancel
	d.mu.Unlock()
	defer cancel()
	if d.finisher != nil {
		d.finisher.stop()
	}
	// Late handlers see their context end; their finishes are retried.
	if !pull.Drain(ctx, stopPull, &d.pullers, &d.inflight, cancel, shutdownGrace) {
		return fmt.Errorf("finish: deliveries did not return %s after their handlers were cancelled", shutdownGrace)
	}
	return nil
}

// shutdownGrace bounds how long Shutdown waits for handlers it cancelled.
const shutdownGrace = 10 * time.Second

// Stop cancels deliveries in flight and stops.
func (d *Deliverer) Stop() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return d.Shutdown(ctx)
}

// deliver handles one finish message.
func (d *Deliverer) deliver(ctx context.Context, name string, msg jetstream.Msg) {
	if msg.Headers().Get(events.HeaderKind) == events.KindMilestoneNotice || events.IsMilestoneNotice(msg.Data()) {
		d.deliverNotice(ctx, name, msg)
		return
	}
	var res Result
	if err := json.Unmarshal(msg.Data(), &res); err != nil || events.ValidateID(res.RunID) != nil || !res.Status.Terminal() {
		reason := "finish message is not a valid finish"
		if err != nil {
			reason += ": " + err.Error()
		}
		d.deadLetter(ctx, name, msg, res, claimed{}, reason, 0)
		return
	}
	log := d.log.With("run_id", res.RunID, "status", res.Status, "handler", name)
	// Milestone notices go out before the run's finishes.
	if owed, err := d.noticesFirst(ctx, log, res); err != nil || owed {
		if err != nil {
			d.fault(ctx, log, "look for milestone notices before the finish", err)
		}
		_ = msg.NakWithDelay(time.Second)
		return
	}

	c, ok := d.claim(ctx, log, msg, res)
	if !ok {
		return
	}
	if id := c.row.Trace().TraceID(); id != "" {
		log = log.With("trace_id", id)
	}
	attempts := c.row.Finishes[res.Status].Attempts
	err := d.invoke(ctx, name, msg, c.row, res)
	if err == nil {
		d.markDelivered(ctx, log, msg, res, c, attempts)
		return
	}
	if ctx.Err() != nil { // shutting down: release the claim, retry soon
		d.release(log, res, c, err, false)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if attempts >= d.cfg.MaxAttempts {
		log.ErrorContext(ctx, "finish handler failed; giving up", "attempts", attempts, "err", err)
		d.deadLetter(ctx, name, msg, res, c, fmt.Sprintf("handler %s failed %d times; last error: %v", name, attempts, err), attempts)
		return
	}
	delay := min(d.cfg.RetryDelay<<min(attempts-1, 20), MaxRetryDelay)
	log.WarnContext(ctx, "finish handler failed; retrying", "attempts", attempts, "retry_in", delay, "err", err)
	d.release(log, res, c, err, false)
	if d.cfg.Observer != nil {
		d.cfg.Observer.FinishFailed(name)
	}
	d.obs.Report(ctx, obs.FinishRetry, res.RunID, "status", res.Status, "handler", name, "attempts", attempts, "error", err)
	_ = msg.NakWithDelay(delay)
}

// fault logs a failed JetStream call at warn level, at most once per
// obs.DefaultLogEvery for each message and class of fault (jsfault), with
// the count of what was left out: during an outage every finish fails the
// same way, and one line says so.
func (d *Deliverer) fault(ctx context.Context, log *slog.Logger, msg string, err error, args ...any) {
	class := jsfault.Classify(ctx, err).String()
	d.logs.Log(ctx, log, slog.LevelWarn, msg+"/"+class, msg, append(args, "fault", class, "err", err)...)
}

// claim reads the row and takes the delivery. It settles msg itself and
// returns false when there is nothing to deliver now.
func (d *Deliverer) claim(ctx context.Context, log *slog.Logger, msg jetstream.Msg, res Result) (claimed, bool) {
	for try := 0; try < 10; try++ {
		row, rev, err := d.store.Get(ctx, res.RunID)
		if errors.Is(err, kv.ErrRunNotFound) {
			log.InfoContext(ctx, "finish for a cleared run; dropping it")
			_ = msg.Ack()
			return claimed{}, false
		}
		if err != nil {
			d.fault(ctx, log, "read row for delivery", err)
			_ = msg.NakWithDelay(time.Second)
			return claimed{}, false
		}
		s := res.Status
		if _, done := row.Delivered[s]; done {
			_ = msg.Ack()
			return claimed{}, false
		}
		fs := row.Finishes[s]
		if fs != nil && !fs.FailedAt.IsZero() {
			_ = msg.Ack()
			return claimed{}, false
		}
		now := time.Now()
		// Finishes go out in the order their transitions happened: a
		// give-up before a later real result.
		for _, other := range row.PendingFinishes() {
			if other != s && fs != nil && row.Finishes[other].DueAt.Before(fs.DueAt) {
				_ = msg.NakWithDelay(time.Second)
				return claimed{}, false
			}
		}
		if fs != nil && fs.ClaimedUntil.After(now) {
			_ = msg.NakWithDelay(fs.ClaimedUntil.Sub(now) + time.Duration(rand.Int64N(int64(250*time.Millisecond))))
			return claimed{}, false
		}
		next := row.Clone()
		if next.Finishes == nil {
			next.Finishes = make(map[events.Status]*kv.FinishState)
		}
		nfs := next.Finishes[s]
		if nfs == nil { // published by someone else than a jetrun transition
			nfs = &kv.FinishState{DueAt: now, Reason: res.Reason, Error: res.Error, ChildStillRunning: res.ChildStillRunning}
			next.Finishes[s] = nfs
		}
		nfs.Attempts++
		nfs.ClaimedBy, nfs.ClaimedUntil = d.cfg.ID, now.Add(d.cfg.Timeout+time.Second)
		nfs.UnservedSince = time.Time{} // its handler is served after all
		newRev, err := d.store.Update(ctx, next, rev)
		if err != nil {
			if errors.Is(err, kv.ErrConflict) {
				continue
			}
			d.fault(ctx, log, "claim delivery", err)
			_ = msg.NakWithDelay(time.Second)
			return claimed{}, false
		}
		return claimed{row: next, rev: newRev}, true
	}
	_ = msg.NakWithDelay(time.Second)
	return claimed{}, false
}

// claimed is the row as a delivery's claim left it, so the writes that
// follow start from it (kv.Store.MutateFrom); the zero value knows no row.
type claimed struct {
	row *kv.Run
	rev uint64
}

// invoke runs the finish handler name on res; see call.
func (d *Deliverer) invoke(ctx context.Context, name string, msg jetstream.Msg, row *kv.Run, res Result) error {
	return d.call(ctx, "finish", name, msg, func(ctx context.Context) error {
		return d.handlers[name].HandleFinish(ctx, row, res)
	})
}

// call runs one handler call (what: finish or milestone) with the
// configured timeout, heartbeating msg meanwhile so it is not redelivered
// under the call; a panic is the call's error.
func (d *Deliverer) call(ctx context.Context, what, name string, msg jetstream.Msg, fn func(ctx context.Context) error) (err error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(d.cfg.Timeout/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
			d.log.ErrorContext(ctx, what+" handler panicked", "handler", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	if err := fn(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("handler ran past its %s timeout", d.cfg.Timeout)
	}
	return nil
}

// markDelivered records the delivery, then acknowledges.
func (d *Deliverer) markDelivered(ctx context.Context, log *slog.Logger, msg jetstream.Msg, res Result, c claimed, attempts int) {
	now := time.Now()
	var due time.Time
	row, _, err := d.store.MutateFrom(ctx, res.RunID, c.row, c.rev, func(r *kv.Run) error {
		if r.Delivered == nil {
			r.Delivered = make(map[events.Status]time.Time)
		}
		if _, ok := r.Delivered[res.Status]; !ok {
			r.Delivered[res.Status] = now
		}
		if fs := r.Finishes[res.Status]; fs != nil {
			fs.ClaimedBy, fs.ClaimedUntil, fs.LastError = "", time.Time{}, ""
			due = fs.DueAt
		}
		return nil
	})
	if err != nil {
		// The claim expires and the finish is delivered again: at least once.
		d.fault(ctx, log, "mark finish delivered; it is delivered again", err)
		return
	}
	if err := msg.Ack(); err != nil {
		d.fault(ctx, log, "ack finish", err)
	}
	if d.cfg.Observer != nil {
		d.cfg.Observer.FinishDelivered(res.Handler)
	}
	d.obs.Report(ctx, obs.FinishDelivered, res.RunID, "status", res.Status, "handler", res.Handler,
		"attempts", attempts, "latency_ms", now.Sub(due).Milliseconds())
	if err := d.store.UnindexIfSettled(ctx, row); err != nil {
		log.WarnContext(ctx, "unindex settled run", "err", err)
	}
}

// release drops the claim after a failed attempt, recording the error; with
// failed it also records that delivery was given up.
func (d *Deliverer) release(log *slog.Logger, res Result, c claimed, cause error, failed bool) *kv.Run {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row, _, err := d.store.MutateFrom(ctx, res.RunID, c.row, c.rev, func(r *kv.Run) error {
		fs := r.Finishes[res.Status]
		if fs == nil {
			return kv.ErrNoChange
		}
		fs.ClaimedBy, fs.ClaimedUntil = "", time.Time{}
		if cause != nil {
			fs.LastError = events.Truncate(cause.Error(), 1000)
		}
		if failed && fs.FailedAt.IsZero() {
			fs.FailedAt = time.Now()
		}
		return nil
	})
	if err != nil && !errors.Is(err, kv.ErrRunNotFound) {
		d.fault(ctx, log, "record delivery failure", err)
	}
	return row
}

// deadLetter files msg in the dead-letter stream, records the failure on the
// row, and terminates msg. If the dead-letter write fails, msg is retried.
func (d *Deliverer) deadLetter(ctx context.Context, name string, msg jetstream.Msg, res Result, c claimed, reason string, attempts int) {
	if _, err := d.js.PublishMsg(ctx, events.DeadLetter(d.cfg.Namespace.DLQFinishSubject(name), msg, reason)); err != nil {
		d.fault(ctx, d.log, "dead-letter finish; keeping it for a retry", err, "handler", name)
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	if events.ValidateID(res.RunID) == nil {
		row := d.release(d.log, res, c, errors.New(reason), true)
		if err := d.store.UnindexIfSettled(ctx, row); err != nil {
			d.log.WarnContext(ctx, "unindex settled run", "run_id", res.RunID, "err", err)
		}
	}
	_ = msg.TermWithReason(events.Truncate(reason, 200))
	if d.cfg.Observer != nil {
		d.cfg.Observer.FinishDeadLettered(name)
	}
	d.obs.Report(ctx, obs.FinishFailed, res.RunID, "status", res.Status, "handler", name, "attempts", attempts, "reason", reason)
}

// Webhook returns a Handler that POSTs the finish as JSON to url, with
// headers Idempotency-Key (<runId>.<status>), Jetrun-Run-Id and
// Jetrun-Status, and the run's W3C traceparent and tracestate if it has
// them. A 2xx answer means delivered; anything else is a failed
// attempt. client nil means a client with no timeout of its own (the
// deliverer's Timeout applies). The handler is also a MilestoneHandler: it
// POSTs milestone notices to the same url (see webhook.HandleMilestone).
func Webhook(url string, client *http.Client) Handler {
	if client == nil {
		client = &http.Client{}
	}
	return webhook{url: url, client: client}
}

// webhook is the Handler Webhook returns.
type webhook struct {
	url    string
	client *http.Client
}

// HandleFinish POSTs the finish.
func (w webhook) HandleFinish(ctx context.Context, run *kv.Run, res Result) error {
	return w.post(ctx, res, withTrace(run, map[string]string{
		"Idempotency-Key": IdempotencyKey(res),
		"Jetrun-Run-Id":   res.RunID,
		"Jetrun-Status":   string(res.Status),
	}))
}

// withTrace adds the run's W3C trace context to headers.
func withTrace(run *kv.Run, headers map[string]string) map[string]string {
	if run == nil {
		return headers
	}
	if tc := run.Trace(); !tc.IsZero() {
		headers[events.HeaderTraceParent] = tc.TraceParent
		if tc.TraceState != "" {
			headers[events.HeaderTraceState] = tc.TraceState
		}
	}
	return headers
}

// HandleMilestone POSTs a milestone notice, with headers Idempotency-Key
// (<runId>.milestone.<name>), Jetrun-Kind (milestone), Jetrun-Run-Id and
// Jetrun-Milestone.
func (w webhook) HandleMilestone(ctx context.Context, run *kv.Run, n Notice) error {
	return w.post(ctx, n, withTrace(run, map[string]string{
		"Idempotency-Key":  NoticeIdempotencyKey(n),
		events.HeaderKind:  events.KindMilestoneNotice,
		"Jetrun-Run-Id":    n.RunID,
		"Jetrun-Milestone": n.Milestone.Name,
	}))
}

func (w webhook) post(ctx context.Context, v any, headers map[string]string) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", w.url, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook %s answered %s: %s", w.url, resp.Status, bytes.TrimSpace(snippet))
	}
	return nil
}
