package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/calls"
	"github.com/jetrun/jetrun/pkg/events"
)

// DefaultCallTimeout is how long Run.Call waits for its reply when ctx
// has no earlier deadline.
const DefaultCallTimeout = 10 * time.Minute

// ErrCallTimeout is returned (wrapped) by Run.Call when no reply came in
// time. The run goes on; a reply that comes later is ignored by this
// attempt.
var ErrCallTimeout = errors.New("call timed out")

// CallError is the error Run.Call returns when the caller's call handler
// failed: the run gets it as a value and goes on.
type CallError struct {
	Name    string
	Seq     int64
	Message string
}

// Error says which call failed, and the caller's message.
func (e *CallError) Error() string {
	return fmt.Sprintf("call %s (%d) failed: %s", e.Name, e.Seq, e.Message)
}

// callHistory is the run's calls, loaded once per attempt.
type callHistory struct {
	loaded bool
	byKey  map[string]*calls.State
	last   int64 // the highest call sequence stored
}

// Call asks the run's caller for something only it can do (a tool that
// runs where the user is) and returns its answer. The request is stored on
// the run's subject jetrun.run.<id>.call before the handler waits; whoever
// serves calls named name (a parent.CallServer, or any NATS consumer
// of the call subject) stores the reply on jetrun.run.<id>.reply. Both are
// durable: an attempt that takes the run over and makes the same call (the
// same name and input, the k-th such call of the attempt) finds the stored
// call and its reply instead of asking again.
//
// While waiting the handler is parked (its slot lent out), the row shows
// waitingFor "call:<name>", and the no-progress budget does not run. A
// failed call handler comes back as a *CallError; no reply within
// DefaultCallTimeout (or ctx's earlier deadline) as ErrCallTimeout; a
// cancel of the run ends the wait with ctx's cause.
//
// Given an ask (at most one), the call is meant for a person: it is also
// an ask (asks inbox: GET /v1/asks, `jetrun asks`), id <runId>.c.<seq>,
// whose payload is the input unless the ask names one; answering the ask
// replies to the call, and any reply settles the ask.
func (r *Run) Call(ctx context.Context, name string, input any, ask ...Ask) (json.RawMessage, error) {
	if err := events.ValidateToken("call name", name); err != nil {
		return nil, fmt.Errorf("worker: call: %w", err)
	}
	raw, err := encodePayload(r.row.ID, "call input", input)
	if err != nil {
		return nil, err
	}
	var spec *events.Ask
	if len(ask) > 0 {
		if spec, err = ask[0].spec(r.row.ID, raw); err != nil {
			return nil, err
		}
	}
	return r.b.Call(ctx, name, raw, spec)
}

// Call is Run.Call on a worker.
func (e *execution) Call(ctx context.Context, name string, raw json.RawMessage, ask *events.Ask) (_ json.RawMessage, err error) {
	if err := e.claimLate(ctx); err != nil {
		return nil, err
	}
	timeout := DefaultCallTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	deadline := time.Now().Add(timeout)

	st, err := e.callFor(ctx, name, raw, timeout)
	if err != nil {
		return nil, fmt.Errorf("worker: call %s: %w", name, err)
	}
	reply := st.Reply
	if ask != nil {
		ask.ID, ask.Via, ask.Name, ask.CallSeq = asks.CallID(e.id, st.Call.Seq), events.AskViaCall, name, st.Call.Seq
		askID := e.openAsk(ctx, ask)
		defer func() {
			var value json.RawMessage
			by, werr := "", err
			if reply != nil {
				value, by, werr = reply.Output, reply.By, nil
				if reply.Error != "" {
					value, _ = json.Marshal(map[string]string{"error": reply.Error})
				}
			}
			e.settleAsk(ctx, askID, value, by, werr)
		}()
	}
	if st.Call.TimeoutMs > 0 {
		// A call an earlier attempt made keeps its deadline: its servers
		// skip it once past.
		if d := st.Call.At.Add(time.Duration(st.Call.TimeoutMs) * time.Millisecond); d.Before(deadline) {
			deadline = d
		}
	}
	if reply == nil {
		defer e.beginWait("call:" + name)()
		err = e.Park(ctx, func(ctx context.Context) (err error) {
			ctx, cancel := context.WithDeadlineCause(ctx, deadline, ErrCallTimeout)
			defer cancel()
			reply, err = calls.AwaitReply(ctx, e.w.js, e.w.ns, e.id, st.Call.Seq, st.StreamSeq)
			return err
		})
		if errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(deadline) {
			err = fmt.Errorf("%w: %w", ErrCallTimeout, err) // ctx's own deadline came first
		}
		if err != nil {
			return nil, fmt.Errorf("worker: call %s (%d): %w", name, st.Call.Seq, err)
		}
	}
	e.noteSignal(time.Now(), nil)
	if reply.Error != "" {
		return nil, &CallError{Name: name, Seq: st.Call.Seq, Message: reply.Error}
	}
	if len(reply.Output) == 0 {
		return json.RawMessage("null"), nil
	}
	return reply.Output, nil
}

// callFor returns the stored call this Call is (an earlier attempt's, with
// its reply if any), or stores a new one.
func (e *execution) callFor(ctx context.Context, name string, input json.RawMessage, timeout time.Duration) (*calls.State, error) {
	e.nest.callMu.Lock() // serializes this attempt's calls while one is looked up and stored
	defer e.nest.callMu.Unlock()
	h := &e.nest.calls
	if !h.loaded {
		if err := e.loadCalls(ctx, h); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(append([]byte(name+"\x00"), input...))
	base := name + ":" + hex.EncodeToString(sum[:8])
	e.nest.mu.Lock()
	e.nest.callKeys[base]++
	key := base + ":" + strconv.Itoa(e.nest.callKeys[base])
	e.nest.mu.Unlock()
	if st := h.byKey[key]; st != nil {
		e.log.DebugContext(ctx, "call found from an earlier attempt", "call", name, "call_seq", st.Call.Seq,
			"answered", st.Reply != nil)
		return st, nil
	}
	c := events.Call{
		RunID: e.id, Seq: h.last + 1, Name: name, Key: key, Input: input,
		AgentType: e.row.AgentType, Parent: e.row.Parent, ParentToolCallID: e.row.ParentToolCallID,
		TimeoutMs: timeout.Milliseconds(), Attempt: e.attempt, At: time.Now(),
	}
	seq, err := e.emit.call(ctx, c)
	if err != nil {
		return nil, err
	}
	st := &calls.State{Call: c, StreamSeq: seq}
	h.byKey[key], h.last = st, c.Seq
	return st, nil
}

// loadCalls reads the calls and replies earlier attempts stored.
func (e *execution) loadCalls(ctx context.Context, h *callHistory) error {
	h.byKey = make(map[string]*calls.State)
	e.nest.mu.Lock()
	if e.nest.callKeys == nil {
		e.nest.callKeys = make(map[string]int)
	}
	e.nest.mu.Unlock()
	if e.row.Attempt <= 1 && e.row.FirstEventSeq == 0 {
		h.loaded = true // a first attempt: nothing before it
		return nil
	}
	states, err := calls.Read(ctx, e.w.js, e.w.ns, e.row)
	if err != nil {
		return err
	}
	for _, st := range states {
		if st.Call.Key != "" {
			h.byKey[st.Call.Key] = st
		}
		h.last = max(h.last, st.Call.Seq)
	}
	h.loaded = true
	return nil
}
