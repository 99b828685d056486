package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/registry"
)

// AgentInfo describes an agent type a worker serves: a description and the
// JSON Schemas of its input and output (see HandleWith).
type AgentInfo = registry.Info

// agentSet is what the worker announces in the agent registry.
type agentSet struct {
	mu    sync.Mutex
	info  map[string]AgentInfo
	input map[string]*registry.Schema
	reg   *registry.Registry
}

// HandleWith registers h for agentType, as Handle does, and announces the
// type in the agent registry (bucket jetrun_agents) with info while the
// worker runs. With info.InputSchema, a dispatch whose input does not match
// is refused: the parent API answers with the schema error (HTTP 400), a
// dispatch published straight to the stream is dead-lettered with it, and
// a run that reaches the handler anyway (its schema changed since it was
// dispatched) ends "error". With info.OutputSchema, a result whose output
// does not match ends the run "error" with the mismatch. It panics on a
// schema that does not compile, and where Handle panics.
func (w *Worker) HandleWith(agentType string, h Handler, info AgentInfo) {
	in, err := registry.Compile(info.InputSchema)
	if err != nil {
		panic(fmt.Sprintf("worker: HandleWith %s: input schema: %v", agentType, err))
	}
	out, err := registry.Compile(info.OutputSchema)
	if err != nil {
		panic(fmt.Sprintf("worker: HandleWith %s: output schema: %v", agentType, err))
	}
	if h == nil {
		panic("worker: HandleWith: nil handler for " + agentType)
	}
	if in != nil || out != nil {
		h = schemaHandler{next: h, agentType: agentType, in: in, out: out}
	}
	w.Handle(agentType, h)
	w.agents.mu.Lock()
	defer w.agents.mu.Unlock()
	if w.agents.info == nil {
		w.agents.info, w.agents.input = map[string]AgentInfo{}, map[string]*registry.Schema{}
	}
	w.agents.info[agentType] = info
	w.agents.input[agentType] = in
}

// schemaHandler checks a run's input and result against its agent type's
// schemas around the handler.
type schemaHandler struct {
	next      Handler
	agentType string
	in, out   *registry.Schema
}

func (s schemaHandler) ServeRun(ctx context.Context, run *Run) (Result, error) {
	if err := s.in.Validate(run.Input()); err != nil {
		return Result{}, fmt.Errorf("input of agent type %s %w", s.agentType, err)
	}
	res, err := s.next.ServeRun(ctx, run)
	if err != nil || s.out == nil {
		return res, err
	}
	out, err := json.Marshal(res.Output)
	if err != nil {
		return res, fmt.Errorf("encode output: %w", err)
	}
	if err := s.out.Validate(out); err != nil {
		return Result{}, fmt.Errorf("output of agent type %s %w", s.agentType, err)
	}
	return res, nil
}

// inputMismatch says why input does not match agentType's input schema
// ("" when it does, or the type has none).
func (w *Worker) inputMismatch(agentType string, input json.RawMessage) string {
	w.agents.mu.Lock()
	in := w.agents.input[agentType]
	w.agents.mu.Unlock()
	if err := in.Validate(input); err != nil {
		return fmt.Sprintf("input of agent type %s %v", agentType, err)
	}
	return ""
}

// announceEvery is how often a worker rewrites its announcements: a third
// of their TTL.
const announceEvery = registry.DefaultTTL / 3

// announce writes one announcement per agent type the worker serves
// (those registered with Handle with no description or schemas). Faults
// are logged; the next round writes again.
func (w *Worker) announce(ctx context.Context) {
	w.agents.mu.Lock()
	reg := w.agents.reg
	w.agents.mu.Unlock()
	if reg == nil {
		r, err := registry.Open(ctx, w.js, w.ns, w.rt.Streams().Replicas)
		if err != nil {
			w.fault(ctx, w.log, "open the agent registry", err)
			return
		}
		reg = r
		w.agents.mu.Lock()
		w.agents.reg = r
		w.agents.mu.Unlock()
	}
	now := time.Now()
	for _, t := range w.AgentTypes() {
		w.agents.mu.Lock()
		info := w.agents.info[t]
		w.agents.mu.Unlock()
		a := registry.Announcement{AgentType: t, Worker: w.cfg.ID, At: now, Info: info,
			LeaseMs: w.cfg.Lease.Milliseconds(), FleetConcurrency: w.cfg.FleetConcurrency}
		if err := reg.Announce(ctx, a, registry.DefaultTTL); err != nil {
			w.fault(ctx, w.log, "announce agent type", err, "agent_type", t)
		}
	}
}

// announceLoop rewrites the announcements until ctx ends.
func (w *Worker) announceLoop(ctx context.Context) {
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.announce(ctx)
		}
	}
}

// withdraw removes the worker's announcements (graceful shutdown).
func (w *Worker) withdraw(ctx context.Context) {
	w.agents.mu.Lock()
	reg := w.agents.reg
	w.agents.mu.Unlock()
	if reg == nil {
		return
	}
	for _, t := range slices.Sorted(maps.Keys(w.handlers)) {
		if err := reg.Withdraw(ctx, t, w.cfg.ID); err != nil {
			w.log.WarnContext(ctx, "withdraw agent type; it expires with its TTL", "agent_type", t, "err", err)
		}
	}
}
