package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/calls"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// forwardDrain bounds how long an awaited child's passthrough goes on
// after the child settled, forwarding the chunks it stored last.
const forwardDrain = 10 * time.Second

// ChildRequest describes a nested run a handler starts with Run.Spawn or
// Run.RunChild. The child is linked to the run that starts it: its parent
// is that run, its depth one more, its parentToolCallId CallID.
type ChildRequest struct {
	// AgentType names the handler that runs the child. Required.
	AgentType string
	// Input is the child's input: any JSON-encodable value. Required.
	Input any
	// CallID is the caller's call id (a model's tool call id, say): the
	// child's parentToolCallId, and what its run id is derived from.
	// Default: "spawn-<n>" for the n-th Spawn or RunChild of this attempt,
	// which is stable only for a handler that starts its children in the
	// same order every attempt.
	CallID string
	// DisplayOrder orders the children of one call; children of one call
	// with different orders get different run ids.
	DisplayOrder int
	// RunID overrides the derived run id (see Child).
	RunID string
	// Detached makes the child a detached run (finish handler, budgets).
	Detached *events.Detached
	// Budget bounds what the child and its own children spend, within
	// the budgets of this run's tree (events.TreeBudget).
	Budget *events.TreeBudget
	// MaxConcurrent caps this run's live children (see
	// parent.Request.MaxConcurrent).
	MaxConcurrent int
	// Passthrough forwards the child's chunks onto this run's timeline as
	// child-chunk events (events.ChildChunk, tagged with the child's id)
	// while the child is awaited. They never count as this run's chunks.
	Passthrough bool
	// Calls answers the child's calls (its Run.Call) of these names while
	// the child is awaited: this handler is the child's caller. A call is
	// answered once its run's stored replies are known, so an attempt that
	// re-attaches answers only what is still unanswered (a handler may run
	// again for a call whose answer an earlier attempt did not store). A
	// handler's error is the answer, unless it is marked with
	// jetruntype.RetryAfter: then the handler is called again after the
	// delay (1s for 0) while the child is awaited.
	Calls map[string]parent.CallHandler
	// Approval, if set, makes the delegation need a person's approval: an
	// approve ask (worker.Ask; its payload by default the child's agent
	// type, call id and input) is asked before the child is dispatched,
	// through a wait for the signal "approve-<childId>". A rejection
	// ({"approved": false, "comment": …}) dispatches nothing: the Child
	// comes back Rejected, and Await (RunChild) returns it as a result,
	// not an error. A child that exists already (an attempt that takes
	// the run over) is not asked about again.
	Approval *Ask
	// Session makes the child a turn of a sub-agent session (Run.History).
	Session string
}

// Child is a nested run started by Run.Spawn.
//
// Its ID is derived from the starting run's id and the call id
// (parent.RunID(runID, callID), or of "callID#order" for a non-zero
// DisplayOrder), so a handler that is taken over after a crash and starts
// the same child again re-attaches to it instead of starting a second one.
type Child struct {
	// ID is the child's run id.
	ID string
	// Row is the child's row as Spawn found or created it.
	Row *jetruntype.Run
	// Created is false when the child existed already (re-attached).
	Created bool

	e           *execution // the attempt that started or re-attached it
	passthrough bool
	calls       map[string]parent.CallHandler
	forwarded   atomic.Int64 // the child's last chunk this handle passed through

	// Rejected is the person's answer when ChildRequest.Approval was
	// refused: the child was never dispatched (Row is nil), and Await
	// returns a result saying so.
	Rejected json.RawMessage
}

// nested holds a Worker's parent client, created on the first Spawn or
// Call: a handler dispatches and awaits its children with the parent API.
type nested struct {
	mu     sync.Mutex
	client *parent.Client
}

// execNested is an attempt's state for nested runs and calls. mu is a
// leaf lock; callMu (held while a call is looked up and stored) comes
// before the emitter's turn and mu.
type execNested struct {
	mu       sync.Mutex
	spawns   int            // Spawn calls so far in this attempt
	callKeys map[string]int // calls so far in this attempt, per name and input

	callMu sync.Mutex
	calls  callHistory
}

// parentClient returns the worker's parent client, creating it once.
func (w *Worker) parentClient(ctx context.Context) (*parent.Client, error) {
	w.nested.mu.Lock()
	defer w.nested.mu.Unlock()
	if w.nested.client != nil {
		return w.nested.client, nil
	}
	c, err := parent.New(w.runtime, parent.Config{
		MaxDepth:           w.cfg.MaxDepth,
		ReattachNoProgress: -1, // a handler awaits its child as long as it lives; budgets are the child's own
		Logger:             w.log,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: parent client: %w", err)
	}
	w.nested.client = c
	return c, nil
}

// Spawn dispatches a nested run linked to this one and returns its handle
// without waiting for it (detached from this handler's attention; the
// child goes on when the handler returns). Starting the same child again
// (same call id and display order) returns the same child: Created false.
// Errors are those of parent.Client.Dispatch (parent.ErrUnknownAgentType,
// parent.ErrBadRequest …).
func (r *Run) Spawn(ctx context.Context, req ChildRequest) (*Child, error) {
	return r.b.Spawn(ctx, req)
}

// Spawn is Run.Spawn on a worker.
func (e *execution) Spawn(ctx context.Context, req ChildRequest) (*Child, error) {
	if err := e.claimLate(ctx); err != nil {
		return nil, err
	}
	if e.ctl.isEnded() {
		return nil, ErrLeaseLost
	}
	e.nest.mu.Lock()
	e.nest.spawns++
	n := e.nest.spawns
	e.nest.mu.Unlock()
	callID := cmp.Or(req.CallID, "spawn-"+strconv.Itoa(n))
	id := req.RunID
	if id == "" {
		key := callID
		if req.DisplayOrder != 0 {
			key += "#" + strconv.Itoa(req.DisplayOrder)
		}
		id = parent.RunID(e.id, key)
	}
	client, err := e.w.parentClient(ctx)
	if err != nil {
		return nil, err
	}
	if req.Approval != nil {
		rejected, err := e.approveChild(ctx, client, id, callID, req)
		if err != nil {
			return nil, err
		}
		if rejected != nil {
			return &Child{ID: id, e: e, Rejected: rejected}, nil
		}
	}
	d, err := client.Dispatch(engine.WithParentRow(ctx, e.row), parent.Request{
		AgentType: req.AgentType, RunID: id, Input: req.Input,
		Parent: e.id, ParentToolCallID: callID, DisplayOrder: req.DisplayOrder, Depth: e.row.Depth + 1,
		Detached: req.Detached, MaxConcurrent: req.MaxConcurrent,
		Budget: req.Budget, Session: req.Session, Tenant: e.row.Tenant,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: run %s: start child %s: %w", e.id, id, err)
	}
	row, created := d.Run, d.Created
	if row.Parent != e.id {
		return nil, fmt.Errorf("worker: run %s: start child %s: %w (it is a child of %q)",
			e.id, id, parent.ErrRunIDConflict, row.Parent)
	}
	if created {
		e.log.DebugContext(ctx, "child run started", "child_run_id", id, "child_agent_type", req.AgentType)
	} else {
		e.log.DebugContext(ctx, "child run re-attached", "child_run_id", id, "child_status", row.Status)
	}
	return &Child{ID: id, Row: row, Created: created, e: e, passthrough: req.Passthrough, calls: req.Calls}, nil
}

// RunChild starts a nested run (as Spawn) and waits for its outcome (as
// Child.Await): a completed child returns its result, any other outcome a
// *parent.Failure as the error (errors.As). The handler is parked
// while it waits, so a worker at concurrency 1 can run a child of its own
// agent type. If ctx ends first, the wait ends (a cancel of this run
// cascades to the child; a lost lease or a shutdown leaves it running for
// the next attempt to re-attach).
func (r *Run) RunChild(ctx context.Context, req ChildRequest) (*parent.Result, error) {
	c, err := r.Spawn(ctx, req)
	if err != nil {
		return nil, err
	}
	return c.Await(ctx)
}

// Await waits, parked, until the child settles (a final status, or a
// give-up whose child stopped) and returns its result, or a
// *parent.Failure as the error. While it waits, the run's row shows
// waitingFor "run:<childId>" and the no-progress budget does not run. It
// never gives up by itself: the child's own budgets bound it.
func (c *Child) Await(ctx context.Context) (*parent.Result, error) {
	if c.Rejected != nil {
		return rejectedResult(c.ID, c.Rejected), nil
	}
	e := c.e
	client, err := e.w.parentClient(ctx)
	if err != nil {
		return nil, err
	}
	defer e.beginWait("run:" + c.ID)()
	var res *parent.Result
	err = e.Park(ctx, func(ctx context.Context) error {
		var stop func(settled bool)
		if c.passthrough {
			stop = c.forward(ctx)
		}
		var stopCalls func()
		if len(c.calls) > 0 {
			stopCalls = c.answerCalls(ctx)
		}
		var aerr error
		res, aerr = client.Await(ctx, c.ID)
		if stopCalls != nil {
			stopCalls()
		}
		if stop != nil {
			var f *parent.Failure
			failed := errors.As(aerr, &f)
			stop(aerr == nil || failed)
		}
		return aerr
	})
	if err != nil {
		var f *parent.Failure
		if errors.As(err, &f) {
			return nil, err
		}
		return nil, fmt.Errorf("worker: run %s: await child %s: %w", e.id, c.ID, err)
	}
	return res, nil
}

// beginWait records that the handler waits for what (shown as the row's
// waitingFor; the no-progress budget does not run meanwhile); the returned
// function ends the wait.
func (e *execution) beginWait(what string) func() {
	return e.rw.beginWait(what)
}

// forward copies the child's chunks onto this run's timeline as
// child-chunk events until the child ends; stop ends it (after the
// child's last chunks when it settled).
func (c *Child) forward(ctx context.Context) (stop func(settled bool)) {
	e := c.e
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		after := c.forwarded.Load()
		if after == 0 && !c.Created {
			n, err := e.forwardedUpTo(fctx, c.ID)
			if err != nil && fctx.Err() == nil {
				e.w.fault(fctx, e.log, "read forwarded child chunks; forwarding again from the first", err)
			}
			after = n
		}
		opts := events.ReplayOptions{
			StartSeq:  c.Row.FirstEventSeq,
			StartTime: c.Row.CreatedAt.Add(-time.Minute), // tolerate clock skew with the server
			Kinds:     []string{events.KindChunk},
		}
		for ev, err := range wire.Replay(fctx, e.w.js, e.w.ns, c.ID, opts) {
			if err != nil {
				if fctx.Err() == nil {
					e.w.fault(fctx, e.log, "follow child chunks", err, "child_run_id", c.ID)
				}
				return
			}
			ch := ev.Chunk
			if ch == nil || ch.Seq <= after {
				continue
			}
			cc := events.ChildChunk{RunID: e.id, ChildRunID: c.ID, Seq: ch.Seq, Data: ch.Data, Attempt: e.attempt}
			if _, err := e.pub.publish(fctx, events.KindChildChunk, wire.ChildChunkMsgID(e.id, c.ID, ch.Seq), cc, false); err != nil {
				if fctx.Err() == nil && !errors.Is(err, ErrLeaseLost) {
					e.w.fault(fctx, e.log, "forward child chunk", err, "child_run_id", c.ID)
				}
				return
			}
			after = ch.Seq
			c.forwarded.Store(after)
			e.noteSignal(time.Now(), nil) // the child's output is this run's progress too
		}
	}()
	return func(settled bool) {
		if settled {
			t := time.NewTimer(forwardDrain)
			select {
			case <-done:
			case <-t.C:
			}
			t.Stop()
		}
		cancel()
		<-done
	}
}

// forwardedUpTo returns the sequence of the last chunk of child already
// forwarded onto this run's timeline (by an earlier attempt).
func (e *execution) forwardedUpTo(ctx context.Context, child string) (int64, error) {
	row := e.rw.row()
	first, created := row.FirstEventSeq, row.CreatedAt
	opts := events.ReplayOptions{
		StartSeq:  first,
		StartTime: created.Add(-time.Minute),
		Kinds:     []string{events.KindChildChunk},
		Follow:    events.HistoryOnly,
	}
	var last int64
	for ev, err := range wire.Replay(ctx, e.w.js, e.w.ns, e.id, opts) {
		if err != nil {
			return last, err
		}
		if cc := ev.ChildChunk; cc != nil && cc.ChildRunID == child {
			last = max(last, cc.Seq)
		}
	}
	return last, nil
}

// answerCalls follows the child's calls and replies and answers, with the
// handlers of ChildRequest.Calls, every call of theirs that has no reply
// stored, until stop.
func (c *Child) answerCalls(ctx context.Context) (stop func()) {
	e := c.e
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		opts := events.ReplayOptions{
			StartSeq:  c.Row.FirstEventSeq,
			StartTime: c.Row.CreatedAt.Add(-time.Minute), // tolerate clock skew with the server
			// Status events too, though unused: Pending counts them, and the
			// replay must yield the event that says it caught up.
			Kinds: []string{events.KindCall, events.KindReply, events.KindStatus},
		}
		var queued []events.Call // calls seen before the replay caught up
		answered := make(map[int64]bool)
		for ev, err := range wire.Replay(fctx, e.w.js, e.w.ns, c.ID, opts) {
			if err != nil {
				if fctx.Err() == nil {
					e.w.fault(fctx, e.log, "follow child calls", err, "child_run_id", c.ID)
				}
				return
			}
			switch {
			case ev.Reply != nil:
				answered[ev.Reply.Seq] = true
			case ev.Call != nil && c.calls[ev.Call.Name] != nil && !answered[ev.Call.Seq]:
				queued = append(queued, *ev.Call)
			}
			if ev.Pending > 0 {
				continue // the stored history goes on: a reply may follow
			}
			for _, call := range queued {
				if answered[call.Seq] {
					continue
				}
				answered[call.Seq] = true
				wg.Go(func() { c.answer(fctx, call) })
			}
			queued = queued[:0]
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// answer runs the handler of one call and stores its reply.
func (c *Child) answer(ctx context.Context, call events.Call) {
	e := c.e
	var out any
	var err error
	for {
		out, err = c.calls[call.Name].ServeCall(ctx, &call)
		var retry *jetruntype.RetryError
		if ctx.Err() != nil {
			return // the wait ended: a later attempt answers it
		}
		if !errors.As(err, &retry) {
			break
		}
		t := time.NewTimer(cmp.Or(retry.Delay, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	// Stored as a call server stores it; an output that cannot be sent is
	// the answer's failure, so the call does not wait for ever.
	reply, err := calls.NewReply(call.RunID, call.Seq, call.Name, out, errText, e.w.cfg.ID)
	if err != nil {
		reply, _ = calls.NewReply(call.RunID, call.Seq, call.Name, nil, err.Error(), e.w.cfg.ID)
	}
	if err := calls.StoreReply(ctx, e.w.js, e.w.ns, reply, parent.DefaultDispatchRetry); err != nil && ctx.Err() == nil {
		e.w.fault(ctx, e.log, "reply to child call", err, "child_run_id", call.RunID, "call", call.Name)
	}
}
