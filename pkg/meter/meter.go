// Package meter reports every run's starts and finishes, so an operator can
// meter usage per parent and agent type.
//
// A Meter follows the status events of every run (jetrun.run.*.status in
// the events stream) through one durable consumer, "meter", shared by every
// process that meters: each status event is handled by one of them. Every
// writer of a run's status — workers, parents, the reconciler, a clear —
// publishes one, so the meter sees awaited and detached runs alike,
// whoever ended them:
//
//   - a "running" event is a start (once per attempt: a takeover or a
//     resumed interrupted run starts again, with attempt + 1);
//   - a completed, error, aborted or interrupted event is a finish (a run
//     cancelled before any worker took it, or cleared while live, finishes
//     aborted without a start; a given-up interrupted run that later ends
//     for real finishes twice, interrupted then its real status).
//
// For each, the Meter calls Config.OnStart or Config.OnFinish, then reports
// run.started or run.finished on jetrun.obs, then acknowledges. A hook error
// is retried after a delay, up to MaxDeliveries in all. Delivery is at least
// once: a process that dies after a hook but before the acknowledgement
// hands the event to another, so hooks deduplicate on Usage.Key. Metering
// starts with the status events published after the consumer was first
// created.
package meter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jetrun/jetrun/internal/engine"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/service"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

// Defaults used where Config leaves a field zero.
const (
	DefaultConcurrency = 8
	DefaultRetryDelay  = time.Second
	DefaultTimeout     = 30 * time.Second
	// MaxDeliveries bounds how often one status event is handed to the
	// hooks; after that it is logged and dropped.
	MaxDeliveries = 10
)

// Usage describes one start or finish of a run.
type Usage struct {
	RunID     string        `json:"runId"`
	AgentType string        `json:"agentType,omitempty"`
	Parent    string        `json:"parent,omitempty"`
	Status    events.Status `json:"status"`
	Reason    string        `json:"reason,omitempty"`
	Attempt   int           `json:"attempt"`
	// StartedAt is when the run first started (zero if it never did); At
	// when this start or finish happened.
	StartedAt time.Time `json:"startedAt,omitzero"`
	At        time.Time `json:"at"`
	// Duration is At - StartedAt for a finish of a run that started.
	Duration time.Duration `json:"duration,omitempty"`
	// Seq is the status event's sequence in the events stream.
	Seq uint64 `json:"seq"`
	// Usage, on a finish, is the tokens and cost the run reported so far
	// (its totals and per model; nil if none). It is cumulative: a run
	// that finishes twice (interrupted, then its real status) carries its
	// totals both times.
	Usage *events.Usage `json:"usage,omitempty"`
}

// Key identifies u across redeliveries: <runId>.<attempt>.<status>.
func (u Usage) Key() string {
	return u.RunID + "." + strconv.Itoa(u.Attempt) + "." + string(u.Status)
}

// Hook receives one start or finish. An error is retried after a delay.
type Hook func(ctx context.Context, u Usage) error

// Config configures a Meter. Zero values mean defaults.
type Config struct {
	// OnStart and OnFinish, if set, are called for every start and finish.
	OnStart, OnFinish Hook
	// Concurrency is how many events this process handles at once
	// (default 8).
	Concurrency int
	// Timeout bounds one hook call; it is also the consumer's ack wait
	// (default 30s).
	Timeout time.Duration
	// RetryDelay is the wait before a failed hook is retried (default 1s).
	RetryDelay time.Duration
	// Logger receives logs (default: discard), among them the events
	// run.started and run.finished at debug level (obs.NewHandler
	// publishes them at every level).
	Logger *slog.Logger
	// Observer, if set, is told when the meter's consumer had to be
	// restored (deleted or changed by someone else), for metrics.
	Observer Observer
}

// Observer is told what a Meter repairs. Its methods must be safe for
// concurrent use.
type Observer interface {
	// ConsumerRestored is called when the durable consumer was restored
	// after it vanished ("missing") or its settings changed ("drifted").
	ConsumerRestored(consumer, reason string)
}

// validate reports every invalid field at once.
func (c Config) validate() error {
	var errs []error
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency must not be negative, got %d", c.Concurrency))
	}
	if c.Timeout < 0 || c.RetryDelay < 0 {
		errs = append(errs, errors.New("timeout and retry delay must not be negative"))
	}
	return errors.Join(errs...)
}

// Meter reports starts and finishes; see the package comment.
type Meter struct {
	cfg Config
	rt  *engine.Runtime
	js  jetstream.JetStream
	log *slog.Logger

	life service.Lifecycle
}

// New returns a Meter on rt. It does no I/O: Start creates the consumer.
func New(runtime *jetrun.Runtime, cfg Config) (*Meter, error) {
	rt := engine.From(runtime)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("meter: config: %w", err)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, DefaultRetryDelay)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Meter{cfg: cfg, rt: rt, js: rt.JetStream(), log: cfg.Logger}, nil
}

// Start creates (or checks) the durable consumer, then
// meters until Shutdown or Stop, or until ctx ends (then as Stop).
func (m *Meter) Start(ctx context.Context) error {
	if err := m.life.Begin(); err != nil {
		return fmt.Errorf("meter: %w", err)
	}
	ns := m.rt.Namespace()
	cfg := jetstream.ConsumerConfig{
		Durable:       wire.MeterConsumer,
		Description:   "jetrun metering: every run's starts and finishes",
		FilterSubject: ns.StatusWildcard(),
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       m.cfg.Timeout,
		MaxDeliver:    MaxDeliveries,
	}
	p := service.NewPullers(ctx)
	for _, stream := range m.rt.EventsStreamNames() { // one consumer per events stream
		// A consumer restored from where it had got to keeps its start.
		c, err := pull.CreateOrAdopt(ctx, m.js, stream, cfg)
		if err != nil {
			p.Drain(ctx) // stops the consumers' loops started already
			return fmt.Errorf("meter: create consumer on %s: %w", stream, err)
		}
		// Metering is billing: a consumer someone deleted or re-pointed is
		// restored from where it had got to, not "deliver new".
		keep := &pull.Keeper{JS: m.js, Stream: stream, Config: cfg, Resume: true, Ensure: m.rt.Repair,
			Logger: m.log}
		if m.cfg.Observer != nil {
			keep.Restorer = m.cfg.Observer
		}
		keep.Observe(c.CachedInfo())
		p.Go(pull.Loop{
			Consumer: c, Concurrency: m.cfg.Concurrency,
			Handle:  func(ctx context.Context, msg jetstream.Msg, _ *pull.Slot) settle.Outcome { return m.meter(ctx, msg) },
			Stopped: func(jetstream.Msg) settle.Outcome { return settle.Retry(0) }, // another process takes it at once
			Logger:  m.log, Name: wire.MeterConsumer,
			Repair: keep.Repair, Keep: keep,
		})
	}
	m.life.Running(ctx, func(ctx context.Context) error {
		if !p.Drain(ctx) {
			return fmt.Errorf("meter: hooks did not return %s after they were cancelled", service.Grace)
		}
		return nil
	})
	return nil
}

// Shutdown stops fetching and waits for hooks in flight until ctx is done,
// then cancels them (their events are handed out again). It is idempotent
// and safe before Start.
func (m *Meter) Shutdown(ctx context.Context) error { return m.life.Shutdown(ctx) }

// Stop cancels hooks in flight and stops.
func (m *Meter) Stop() error { return m.life.Stop() }

// Stopped returns a channel closed once the meter has stopped.
func (m *Meter) Stopped() <-chan struct{} { return m.life.Stopped() }

// meter meters one status event and says how to settle its message.
func (m *Meter) meter(ctx context.Context, msg jetstream.Msg) settle.Outcome {
	var ev events.StatusEvent
	if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.RunID == "" {
		return settle.Term("not a status event: nothing to meter")
	}
	var (
		hook  Hook
		event string
	)
	switch {
	case ev.Status == events.StatusRunning:
		hook, event = m.cfg.OnStart, obs.RunStarted
	case ev.Status.Terminal() && !strings.HasSuffix(msg.Headers().Get(nats.MsgIdHdr), wire.StoppedSuffix):
		hook, event = m.cfg.OnFinish, obs.RunFinished
	default: // starting, or the note that a given-up child has stopped
		return settle.Ack()
	}
	u := Usage{RunID: ev.RunID, AgentType: ev.AgentType, Parent: ev.Parent, Status: ev.Status, Reason: ev.Reason,
		Attempt: ev.Attempt, StartedAt: ev.StartedAt, At: ev.At, Usage: ev.Usage}
	if md, err := msg.Metadata(); err == nil {
		u.Seq = md.Sequence.Stream
	}
	if event == obs.RunFinished && !u.StartedAt.IsZero() && u.At.After(u.StartedAt) {
		u.Duration = u.At.Sub(u.StartedAt)
	}
	if hook != nil {
		hctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		err := hook(hctx, u)
		cancel()
		if err != nil {
			m.log.WarnContext(ctx, "metering hook failed", "run_id", u.RunID, "status", u.Status, "err", err)
			return settle.Retry(m.cfg.RetryDelay)
		}
	}
	attrs := []any{"agent_type", u.AgentType, "parent", u.Parent, "status", u.Status, "attempt", u.Attempt, "seq", u.Seq}
	if event == obs.RunFinished {
		attrs = append(attrs, "reason", u.Reason, "duration_ms", u.Duration.Milliseconds())
		if u.Usage != nil {
			attrs = append(attrs, "input_tokens", u.Usage.InputTokens, "output_tokens", u.Usage.OutputTokens,
				"cost_micros", u.Usage.CostMicros)
		}
	}
	obs.Debug(ctx, m.log, event, u.RunID, attrs...)
	return settle.Ack()
}
