package parent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/calls"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/service"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// CallHandler answers calls: it returns the output (any JSON-encodable
// value; json.RawMessage passes through) or an error. An error, plain or
// marked with jetruntype.Cancel, is the answer: the calling run gets it as
// an error value (worker.CallError) and goes on. An error marked with
// jetruntype.RetryAfter(err, d) is not: the call is served again after d
// (0: a back-off that grows with each try), until it is answered or past
// its timeout.
type CallHandler interface {
	ServeCall(ctx context.Context, call *Call) (any, error)
}

// CallHandlerFunc is a function that is a CallHandler.
type CallHandlerFunc func(ctx context.Context, call *Call) (any, error)

// ServeCall calls f(ctx, call).
func (f CallHandlerFunc) ServeCall(ctx context.Context, call *Call) (any, error) { return f(ctx, call) }

// Call serving defaults.
const (
	// DefaultCallAckWait is how long a call handed to a call server may go
	// without a sign of life before another server gets it; the server
	// renews it every third of it while its handler runs.
	DefaultCallAckWait = 30 * time.Second
	// DefaultCallConcurrency bounds the calls of one name a server
	// answers at once.
	DefaultCallConcurrency = 16
	// callBacklog is how far back a new call consumer starts: calls made
	// before anyone served the name, and still within the longest default
	// call timeout, are answered.
	callBacklog = 10 * time.Minute
	// maxCallRetryDelay bounds the back-off of a call whose handler asked
	// for a retry without a delay.
	maxCallRetryDelay = 30 * time.Second
)

// CallServerConfig configures a CallServer. Zero values mean defaults.
type CallServerConfig struct {
	// AckWait is how long a call handed to this server may go without a
	// sign of life before another server gets it (default
	// DefaultCallAckWait; at least 1s). It takes effect when this server
	// creates a name's consumer; an existing consumer keeps its own.
	AckWait time.Duration
	// Concurrency bounds the calls of each name answered at once (default
	// DefaultCallConcurrency).
	Concurrency int
	// Logger receives logs (default: discard).
	Logger *slog.Logger
}

// validate reports every invalid field at once.
func (c CallServerConfig) validate() error {
	var errs []error
	if c.AckWait != 0 && c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("ack wait must be at least 1s, got %s", c.AckWait))
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency must not be negative, got %d", c.Concurrency))
	}
	return errors.Join(errs...)
}

// CallServer answers the calls runs make with a worker's Run.Call. Create it
// with [Client.NewCallServer], register a handler per call name with
// [CallServer.Handle], then [CallServer.Start] it; stop it with
// [CallServer.Shutdown] (graceful) or [CallServer.Stop].
//
// Every server of a name shares one durable consumer ("call-<name>"):
// each call goes to one of them, and a call whose server died before
// replying goes to another (or the same one, restarted). A call is
// answered at most once: a server skips calls already answered, calls of
// runs that ended, and calls past their timeout. A handler runs at least
// once per call (a server that dies between running it and storing the
// reply leaves it to run again): make it idempotent where that matters.
type CallServer struct {
	c   *Client
	cfg CallServerConfig
	log *slog.Logger

	mu       sync.Mutex
	started  bool
	handlers map[string]CallHandler

	life service.Lifecycle
	logs obs.Throttle // warnings about JetStream faults, per class
}

// NewCallServer returns a CallServer that answers calls for this client.
// It does no I/O: Start binds the consumers.
func (c *Client) NewCallServer(cfg CallServerConfig) (*CallServer, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("parent: call server config: %w", err)
	}
	cfg.AckWait = cmp.Or(cfg.AckWait, DefaultCallAckWait)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultCallConcurrency)
	if cfg.Logger == nil {
		cfg.Logger = c.log
	}
	return &CallServer{c: c, cfg: cfg, log: cfg.Logger, handlers: make(map[string]CallHandler)}, nil
}

// Handle registers h for the calls named name. It panics if name is not a
// valid token, if a handler is already registered for it, or after Start,
// like net/http's ServeMux.
func (s *CallServer) Handle(name string, h CallHandler) {
	if err := events.ValidateToken("call name", name); err != nil {
		panic("parent: CallServer.Handle: " + err.Error())
	}
	if h == nil {
		panic("parent: CallServer.Handle: nil handler for " + name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		panic("parent: CallServer.Handle called after Start")
	}
	if _, dup := s.handlers[name]; dup {
		panic("parent: CallServer.Handle: a handler for " + name + " is already registered")
	}
	s.handlers[name] = h
}

// HandleFunc registers f for the calls named name; see Handle.
func (s *CallServer) HandleFunc(name string, f func(ctx context.Context, call *Call) (any, error)) {
	s.Handle(name, CallHandlerFunc(f))
}

// Start binds (or creates) the consumer of each name registered, then
// answers calls until Shutdown or Stop, or until ctx ends (then as Stop).
func (s *CallServer) Start(ctx context.Context) error {
	if err := s.life.Begin(); err != nil {
		return fmt.Errorf("parent: call server: %w", err)
	}
	s.mu.Lock()
	s.started = true
	handlers := s.handlers
	s.mu.Unlock()
	if len(handlers) == 0 {
		return errors.New("parent: call server: no handlers registered")
	}
	consumers := make(map[string][]jetstream.Consumer, len(handlers))
	for name := range handlers {
		for _, stream := range s.c.rt.EventsStreamNames() { // one per events stream
			cons, err := s.c.callConsumer(ctx, stream, name, s.cfg.AckWait, s.cfg.Concurrency)
			if err != nil {
				return fmt.Errorf("parent: call server: consumer of %s on %s: %w", name, stream, err)
			}
			consumers[name] = append(consumers[name], cons)
		}
	}
	p := service.NewPullers(ctx)
	for name, conss := range consumers {
		h := handlers[name]
		for _, cons := range conss {
			p.Go(pull.Loop{
				Consumer: cons, Concurrency: s.cfg.Concurrency,
				Handle: func(ctx context.Context, m jetstream.Msg, _ *pull.Slot) settle.Outcome {
					return s.serve(ctx, name, m, h)
				},
				Stopped: func(jetstream.Msg) settle.Outcome { return settle.Retry(0) }, // straight to another server
				Logger:  s.log, Name: callConsumer(name),
			})
		}
	}
	s.life.Running(ctx, func(ctx context.Context) error {
		if !p.Drain(ctx) {
			return fmt.Errorf("parent: call handlers did not return %s after they were cancelled", service.Grace)
		}
		return nil
	})
	return nil
}

// Shutdown stops taking calls and waits for the handlers in flight until
// ctx ends, then cancels them: calls they did not answer go to another
// server at once. It is idempotent and safe before Start.
func (s *CallServer) Shutdown(ctx context.Context) error { return s.life.Shutdown(ctx) }

// Stop cancels the handlers in flight and stops.
func (s *CallServer) Stop() error { return s.life.Stop() }

// Stopped returns a channel closed once the server has stopped.
func (s *CallServer) Stopped() <-chan struct{} { return s.life.Stopped() }

// callConsumer is the durable consumer on the events stream shared by
// every server of calls named name.
func callConsumer(name string) string { return "call-" + name }

// callConsumer binds the name's consumer on events stream stream, creating
// it if needed.
func (c *Client) callConsumer(ctx context.Context, stream, name string, ackWait time.Duration, concurrency int) (jetstream.Consumer, error) {
	cons, err := c.js.Consumer(ctx, stream, callConsumer(name))
	if err == nil {
		return cons, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	from := time.Now().Add(-callBacklog)
	cons, err = c.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       callConsumer(name),
		Description:   "jetrun: servers of calls named " + name,
		FilterSubject: c.ns.CallWildcard(),
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &from,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * max(concurrency, DefaultCallConcurrency),
	})
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return c.js.Consumer(ctx, stream, callConsumer(name))
	}
	return cons, err
}

// serve answers one call message of name with h and says how to settle it.
func (s *CallServer) serve(ctx context.Context, name string, m jetstream.Msg, h CallHandler) settle.Outcome {
	c := s.c
	var call Call
	if err := json.Unmarshal(m.Data(), &call); err != nil || events.ValidateID(call.RunID) != nil || call.Seq <= 0 {
		return settle.Term("not a call anyone can answer")
	}
	if call.Name != name {
		return settle.Ack() // another name's call
	}
	log := s.log.With("run_id", call.RunID, "call", name, "call_seq", call.Seq)
	meta, err := m.Metadata()
	if err != nil {
		return settle.Term("no metadata")
	}
	skip, err := calls.Settled(ctx, c.js, c.ns, c.store, &call, meta.Sequence.Stream)
	if err != nil {
		if ctx.Err() == nil {
			class := jsfault.Classify(ctx, err).String()
			s.logs.Log(ctx, s.log, slog.LevelWarn, "check call/"+class, "check call", "run_id", call.RunID, "call", name,
				"fault", class, "err", err)
		}
		return settle.Retry(time.Second)
	}
	if skip != "" {
		log.DebugContext(ctx, "call skipped", "why", skip)
		return settle.Ack()
	}

	stop := settle.KeepAlive(ctx, m, s.cfg.AckWait/3) // the call stays ours while the handler runs
	out, herr := h.ServeCall(ctx, &call)
	stop()
	var retry *jetruntype.RetryError
	switch {
	case herr != nil && ctx.Err() != nil:
		return settle.Retry(0) // stopping: straight to another server
	case errors.As(herr, &retry):
		d := retry.Delay
		if d <= 0 {
			d = min(time.Second<<min(meta.NumDelivered-1, 5), maxCallRetryDelay)
		}
		log.WarnContext(ctx, "call handler failed; retrying", "retry_in", d, "err", herr)
		return settle.Retry(d)
	}
	reply := events.Reply{RunID: call.RunID, Seq: call.Seq, Name: name, By: callServerID(), At: time.Now()}
	if herr != nil {
		reply.Error = herr.Error()
	} else if raw, err := calls.EncodeOutput(out); err != nil {
		reply.Error = err.Error()
	} else {
		reply.Output = raw
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.DispatchRetry)
	defer cancel()
	if err := calls.StoreReply(wctx, c.js, c.ns, reply, c.cfg.DispatchRetry); err != nil {
		log.WarnContext(wctx, "store call reply; the call is served again", "err", err)
		return settle.Retry(time.Second)
	}
	log.DebugContext(ctx, "call answered", "failed", herr != nil)
	return settle.Ack() // should the ack fail, a redelivery finds the reply and skips
}
