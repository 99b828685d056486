package parent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Call is a run's request to its caller (events.Call): its name, input,
// the run that asks and that run's parent.
type Call = events.Call

// CallHandler answers calls: it returns the output (any JSON-encodable
// value; json.RawMessage passes through) or an error, which the calling
// run gets as an error value (worker.CallError) and goes on.
type CallHandler func(ctx context.Context, call *Call) (any, error)

// Call serving defaults.
const (
	// DefaultCallAckWait is how long a call handed to a call server may go
	// without a sign of life before another server gets it; the server
	// renews it every third of it while its handler runs.
	DefaultCallAckWait = 30 * time.Second
	// DefaultCallConcurrency bounds the calls one server answers at once.
	DefaultCallConcurrency = 16
	// callBacklog is how far back a new call consumer starts: calls made
	// before anyone served the name, and still within the longest default
	// call timeout, are answered.
	callBacklog = 10 * time.Minute
	// callFetchWait bounds one fetch: how long Stop may wait for an idle
	// server. Fetching one call at a time keeps none waiting in a buffer
	// while its ack wait runs.
	callFetchWait = time.Second
)

// CallOption tunes HandleCall.
type CallOption func(*callOptions)

type callOptions struct{ ackWait time.Duration }

// WithCallAckWait sets how long a call handed to a server may go without a
// sign of life before another server gets it (default DefaultCallAckWait;
// at least 1s). It takes effect when this server creates the name's
// consumer; an existing consumer keeps its own.
func WithCallAckWait(d time.Duration) CallOption { return func(o *callOptions) { o.ackWait = d } }

// CallConsumer is the durable consumer on the events stream shared by
// every server of calls named name.
func CallConsumer(name string) string { return "call-" + name }

// CallServer answers the calls of one name (see Client.HandleCall).
type CallServer struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
}

// Stop stops taking calls and waits for the handlers in flight; calls
// they did not answer go to another server at once. Idempotent.
func (s *CallServer) Stop() {
	s.cancel()
	<-s.done
}

// HandleCall answers the calls named name that runs make with Run.Call,
// with h, until Stop or ctx ends. Every server of a name shares one
// durable consumer (CallConsumer(name)): each call goes to one of them,
// and a call whose server died before replying goes to another (or the
// same one, restarted). A call is answered at most once: a server skips
// calls already answered, calls of runs that ended, and calls past their
// timeout. The handler runs at least once per call (a server that dies
// between running it and storing the reply leaves it to run again):
// make it idempotent where that matters.
func (c *Client) HandleCall(ctx context.Context, name string, h CallHandler, opts ...CallOption) (*CallServer, error) {
	if err := events.ValidateCallName(name); err != nil {
		return nil, fmt.Errorf("parent: handle call: %w", err)
	}
	if h == nil {
		return nil, fmt.Errorf("parent: handle call %s: nil handler", name)
	}
	o := callOptions{ackWait: DefaultCallAckWait}
	for _, opt := range opts {
		opt(&o)
	}
	if o.ackWait < time.Second {
		return nil, fmt.Errorf("parent: handle call %s: ack wait must be at least 1s, got %s", name, o.ackWait)
	}
	cons, err := c.callConsumer(ctx, name, o.ackWait)
	if err != nil {
		return nil, fmt.Errorf("parent: handle call %s: %w", name, err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &CallServer{name: name, cancel: cancel, done: make(chan struct{})}
	stopOnCtx := context.AfterFunc(ctx, cancel)
	go func() {
		defer close(s.done)
		defer stopOnCtx()
		c.serveCalls(sctx, name, cons, h, o.ackWait)
	}()
	return s, nil
}

// callConsumer binds the name's consumer, creating it if needed.
func (c *Client) callConsumer(ctx context.Context, name string, ackWait time.Duration) (jetstream.Consumer, error) {
	stream := c.ns.EventsStream()
	cons, err := c.js.Consumer(ctx, stream, CallConsumer(name))
	if err == nil {
		return cons, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	from := time.Now().Add(-callBacklog)
	cons, err = c.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       CallConsumer(name),
		Description:   "jetrun: servers of calls named " + name,
		FilterSubject: c.ns.CallWildcard(),
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &from,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * DefaultCallConcurrency,
	})
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return c.js.Consumer(ctx, stream, CallConsumer(name))
	}
	return cons, err
}

// serveCalls fetches calls until ctx ends, at most DefaultCallConcurrency
// at once.
func (c *Client) serveCalls(ctx context.Context, name string, cons jetstream.Consumer, h CallHandler, ackWait time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, DefaultCallConcurrency)
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(callFetchWait))
		if err != nil {
			<-slots
			if ctx.Err() == nil {
				c.fault(ctx, "fetch calls", err, "call", name)
				pauseFor(ctx, time.Second)
			}
			continue
		}
		got := false
		for m := range msgs.Messages() {
			got = true
			wg.Go(func() {
				defer func() { <-slots }()
				c.serveCall(ctx, name, m, h, ackWait)
			})
		}
		if !got {
			<-slots
		}
		if err := msgs.Error(); err != nil && ctx.Err() == nil && !errors.Is(err, nats.ErrTimeout) {
			c.fault(ctx, "fetch calls", err, "call", name)
		}
	}
}

func pauseFor(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// serveCall answers one call message.
func (c *Client) serveCall(ctx context.Context, name string, m jetstream.Msg, h CallHandler, ackWait time.Duration) {
	var call Call
	if err := json.Unmarshal(m.Data(), &call); err != nil || events.ValidateID(call.RunID) != nil || call.Seq <= 0 {
		_ = m.Term() // not a call anyone can answer
		return
	}
	if call.Name != name {
		_ = m.Ack() // another name's call
		return
	}
	log := c.log.With("run_id", call.RunID, "call", name, "call_seq", call.Seq)
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	skip, err := c.callSettled(ctx, &call, meta.Sequence.Stream)
	if err != nil {
		if ctx.Err() == nil {
			c.fault(ctx, "check call", err, "run_id", call.RunID, "call", name)
		}
		_ = m.NakWithDelay(time.Second)
		return
	}
	if skip != "" {
		log.DebugContext(ctx, "call skipped", "why", skip)
		_ = m.Ack()
		return
	}

	// Keep the call ours while the handler runs.
	hctx, cancel := context.WithCancel(ctx)
	var beat sync.WaitGroup
	beat.Go(func() {
		t := time.NewTicker(ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	})
	out, herr := h(hctx, &call)
	cancel()
	beat.Wait()
	if herr != nil && ctx.Err() != nil {
		_ = m.Nak() // stopping: straight to another server
		return
	}
	reply := events.Reply{RunID: call.RunID, Seq: call.Seq, Name: name, By: callServerID(), At: time.Now()}
	if herr != nil {
		reply.Error = herr.Error()
	} else if raw, err := encodeOutput(out); err != nil {
		reply.Error = err.Error()
	} else {
		reply.Output = raw
	}
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.DispatchRetry)
	defer wcancel()
	if err := c.storeReply(wctx, reply); err != nil {
		log.WarnContext(wctx, "store call reply; the call is served again", "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	if err := m.Ack(); err != nil {
		log.WarnContext(wctx, "ack call", "err", err) // a redelivery finds the reply and skips
	}
	log.DebugContext(ctx, "call answered", "failed", herr != nil)
}

// Reply stores the answer to call seq of run id, as a call server does:
// output (any JSON-encodable value) or, with errText set, a failure the
// run gets as an error value. The first reply stored for a call counts.
func (c *Client) Reply(ctx context.Context, id string, seq int64, name string, output any, errText string) error {
	if err := events.ValidateID(id); err != nil {
		return fmt.Errorf("parent: reply: %w", err)
	}
	reply := events.Reply{RunID: id, Seq: seq, Name: name, Error: errText, By: callServerID(), At: time.Now()}
	if errText == "" {
		raw, err := encodeOutput(output)
		if err != nil {
			return fmt.Errorf("parent: reply to run %s: %w", id, err)
		}
		reply.Output = raw
	}
	return c.storeReply(ctx, reply)
}

func (c *Client) storeReply(ctx context.Context, reply events.Reply) error {
	data, err := json.Marshal(reply)
	if err != nil {
		return err
	}
	subject := c.ns.RunSubject(reply.RunID, events.KindReply)
	return jsfault.Retry(ctx, c.cfg.DispatchRetry, func(ctx context.Context) error {
		_, err := c.js.Publish(ctx, subject, data, jetstream.WithMsgID(wire.ReplyMsgID(reply.RunID, reply.Seq)))
		return err
	})
}

func encodeOutput(out any) (json.RawMessage, error) {
	var raw json.RawMessage
	switch v := out.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, errors.New("call output is not valid JSON")
		}
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("call output is not JSON-encodable: %w", err)
		}
		raw = b
	}
	if len(raw) > events.MaxCallBytes {
		return nil, fmt.Errorf("call output is %d bytes; the limit is %d", len(raw), events.MaxCallBytes)
	}
	return raw, nil
}

// callSettled says why a call needs no answer ("" when it does): it was
// answered already, its run ended, or it timed out.
func (c *Client) callSettled(ctx context.Context, call *Call, streamSeq uint64) (string, error) {
	if call.TimeoutMs > 0 && time.Since(call.At) > time.Duration(call.TimeoutMs)*time.Millisecond {
		return "timed out", nil
	}
	row, _, err := c.store.Get(ctx, call.RunID)
	switch {
	case errors.Is(err, runstore.ErrRunNotFound):
		return "run not found", nil
	case err != nil:
		return "", err
	case row.Status.Final():
		return "run ended", nil
	}
	opts := events.ReplayOptions{After: streamSeq, Kinds: []string{events.KindReply}, Follow: events.HistoryOnly}
	for ev, err := range wire.Replay(ctx, c.js, c.ns, call.RunID, opts) {
		if err != nil {
			return "", err
		}
		if ev.Reply != nil && ev.Reply.Seq == call.Seq {
			return "answered", nil
		}
	}
	return "", nil
}

// Calls returns a run's calls in order, each with its reply once
// answered (nil while pending), or ErrRunNotFound for an unknown run.
func (c *Client) Calls(ctx context.Context, id string) ([]CallState, error) {
	row, err := c.Inspect(ctx, id)
	if errors.Is(err, ErrRunNotFound) {
		return nil, fmt.Errorf("parent: calls of run %s: %w", id, ErrRunNotFound)
	}
	if err != nil {
		return nil, err
	}
	opts := events.ReplayOptions{
		StartSeq: row.FirstEventSeq, StartTime: row.CreatedAt.Add(-time.Minute),
		Kinds: []string{events.KindCall, events.KindReply}, Follow: events.HistoryOnly,
	}
	var out []CallState
	idx := make(map[int64]int)
	for ev, err := range wire.Replay(ctx, c.js, c.ns, id, opts) {
		if err != nil {
			return nil, fmt.Errorf("parent: calls of run %s: %w", id, err)
		}
		switch {
		case ev.Call != nil:
			if _, dup := idx[ev.Call.Seq]; !dup {
				idx[ev.Call.Seq] = len(out)
				out = append(out, CallState{Call: *ev.Call})
			}
		case ev.Reply != nil:
			if i, ok := idx[ev.Reply.Seq]; ok && out[i].Reply == nil {
				r := *ev.Reply
				out[i].Reply = &r
			}
		}
	}
	return out, nil
}

// CallState is one call of a run and its reply (nil while pending).
type CallState struct {
	Call  Call          `json:"call"`
	Reply *events.Reply `json:"reply,omitempty"`
}

var (
	serverIDOnce sync.Once
	serverID     string
)

// callServerID names this process on the replies it stores.
func callServerID() string {
	serverIDOnce.Do(func() {
		host, _ := os.Hostname()
		serverID = host + "-" + strconv.Itoa(os.Getpid())
	})
	return serverID
}

// Errors of AnswerCall; test with errors.Is.
var (
	// ErrCallNotFound is returned by AnswerCall for a call the run never
	// made.
	ErrCallNotFound = errors.New("no such call")
	// ErrCallAnswered is returned by AnswerCall for a call that has a
	// reply already.
	ErrCallAnswered = errors.New("call answered already")
)

// AnswerCall answers call seq of run id by hand (the HTTP API and the CLI
// do): output, or errText for a failure the run gets as an error value. It
// returns ErrRunEnded for a run that ended, ErrCallNotFound, or
// ErrCallAnswered; a reply stored by someone else at the same moment may
// still come first (the first stored counts).
func (c *Client) AnswerCall(ctx context.Context, id string, seq int64, output any, errText string) (*CallState, error) {
	row, err := c.Inspect(ctx, id)
	switch {
	case errors.Is(err, ErrRunNotFound):
		return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrRunNotFound)
	case err != nil:
		return nil, err
	case row.Status.Final():
		return nil, fmt.Errorf("parent: answer call %d of run %s: %w (%s)", seq, id, ErrRunEnded, row.Status)
	}
	calls, err := c.Calls(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, cs := range calls {
		if cs.Call.Seq != seq {
			continue
		}
		if cs.Reply != nil {
			return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrCallAnswered)
		}
		if err := c.Reply(ctx, id, seq, cs.Call.Name, output, errText); err != nil {
			return nil, err
		}
		return &cs, nil
	}
	return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrCallNotFound)
}
