package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/engine/subagent"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Sub-agents: the patterns agent frameworks ship (AG2's subagents) as
// nested runs. A handler that drives a model offers it, as tools, the agent
// types it may delegate to (Run.SubAgentTools: task_<agent> with an
// objective and an optional context) and, optionally, create_and_run_agent,
// which makes an agent from a spec and runs it as a child of a generic
// agent type; it hands the model's tool calls to Run.RunSubAgent, which
// runs the child and returns the text the model reads. Variables
// (Run.Variables, Run.SetVariable) go down to each child in its input and
// come back, the ones it changed, when it completes.

// SubAgents says which sub-agents a run offers its model.
type SubAgents struct {
	// Delegates are the agent types offered as task_<agent> tools, with
	// their names and descriptions overridable. Empty: every agent type
	// the agent registry lists (live workers announce them).
	Delegates []Delegate
	// DynamicType is the generic agent type that runs dynamic agents
	// (its handler reads the spec from its input, SubAgentInput.Spec).
	// Empty: no create_and_run_agent tool.
	DynamicType string
	// Pool names the tools a dynamic agent's spec may pick.
	Pool []string
}

// Delegate offers an agent type as a delegate tool: Name defaults to
// task_<AgentType>, Description to the type's registered description.
type Delegate = subagent.Delegate

// SubAgentInput is the input of a run started by Run.RunSubAgent: the
// objective, the optional context, the caller's variables and, for a
// dynamic agent, its spec.
type SubAgentInput = subagent.Input

// AgentSpec is a dynamic agent's spec: a name, a prompt, tools from the
// caller's pool, an optional response schema.
type AgentSpec = subagent.Spec

// SubAgentTools returns the tool definitions of s in format ("openai",
// "anthropic" or "mcp", as the agent registry's tools): a task_<agent> tool
// per delegate, whose arguments are {"objective", "context"?}, and
// create_and_run_agent when s.DynamicType is set, unless this run is
// itself a dynamic agent (those cannot create dynamic agents).
func (r *Run) SubAgentTools(ctx context.Context, s SubAgents, format string) (any, error) {
	agents, err := r.subAgentsKnown(ctx, s)
	if err != nil {
		return nil, err
	}
	dynamic := s.DynamicType != "" && !subagent.IsDynamic(r.Input())
	tools, err := subagent.Tools(agents, s.Delegates, dynamic, s.Pool, format)
	if err != nil {
		return nil, fmt.Errorf("worker: run %s: sub-agent tools: %w", r.ID(), err)
	}
	return tools, nil
}

// RunSubAgent runs the model's tool call callID of tool (a delegate tool
// of s, or create_and_run_agent) with args as a nested run and returns
// what the model reads: the child's output (its summary when it has none).
// What the model can fix — an unknown tool, bad arguments, a spec naming a
// tool outside s.Pool (the answer lists the pool), an answer that does not
// match the spec's response schema, a failed child — is answered as a
// text with a nil error; the error is for what ends the handler's turn
// (a lost lease, ctx). The child's run id derives from callID, so calling
// again after a crash re-attaches to it. Variables the child changed are
// this run's when it completes (Run.Variables).
func (r *Run) RunSubAgent(ctx context.Context, s SubAgents, callID, tool string, args json.RawMessage) (string, error) {
	var agentType, session string
	var in subagent.Input
	var perr error
	if tool == subagent.DynamicTool && s.DynamicType != "" {
		if subagent.IsDynamic(r.Input()) {
			return "error: a dynamic agent cannot create dynamic agents", nil
		}
		agentType = s.DynamicType
		in, perr = subagent.ParseDynamic(args, s.Pool)
	} else {
		agents, err := r.subAgentsKnown(ctx, s)
		if err != nil {
			return "", err
		}
		d, ok := subagent.DelegateOf(tool, agents, s.Delegates)
		if !ok {
			return fmt.Sprintf("error: unknown tool %q: use one of [%s]", tool, strings.Join(r.subAgentToolNames(agents, s), ", ")), nil
		}
		agentType, session = d.AgentType, d.Session
		in, perr = subagent.ParseTask(args)
	}
	if perr != nil {
		return "error: " + tool + ": " + perr.Error(), nil
	}
	vars, err := r.Variables(ctx)
	if err != nil {
		return "", err
	}
	if len(vars) > 0 {
		in.Variables = vars
	}
	res, err := r.RunChild(ctx, ChildRequest{AgentType: agentType, Input: in, CallID: callID, Session: session})
	var f *jetruntype.Failure
	if errors.As(err, &f) {
		return fmt.Sprintf("error: sub-agent %s ended %s: %s", agentType, f.Status, f.Message), nil
	}
	if err != nil {
		return "", err
	}
	if err := r.takeVariables(ctx, res.Row); err != nil {
		return "", err
	}
	if in.Spec != nil {
		if msg := checkResponse(in.Spec.ResponseSchema, res.Output); msg != "" {
			return "error: " + msg, nil
		}
	}
	if len(res.Output) > 0 && string(res.Output) != "null" {
		var text string
		if json.Unmarshal(res.Output, &text) == nil {
			return text, nil
		}
		return string(res.Output), nil
	}
	return res.Summary, nil
}

// checkResponse says why output does not match schema ("" when it does).
func checkResponse(schema, output json.RawMessage) string {
	if len(schema) == 0 {
		return ""
	}
	sc, err := registry.Compile(schema)
	if err != nil {
		return "response schema: " + err.Error()
	}
	if err := sc.Validate(output); err != nil {
		return "the agent's answer does not match its response schema: " + err.Error()
	}
	return ""
}

// subAgentsKnown lists the registry's agent types when s names no
// delegates (they are the delegates then).
func (r *Run) subAgentsKnown(ctx context.Context, s SubAgents) ([]registry.Agent, error) {
	if len(s.Delegates) > 0 {
		return nil, nil
	}
	e, ok := r.b.(*execution)
	if !ok {
		return nil, errors.New("worker: sub-agents: list the registry's agent types: name SubAgents.Delegates outside a worker")
	}
	c, err := e.w.parentClient(ctx)
	if err != nil {
		return nil, err
	}
	agents, err := c.Agents(ctx)
	if err != nil {
		return nil, fmt.Errorf("worker: run %s: list agent types: %w", r.ID(), err)
	}
	if s.DynamicType != "" { // the generic type is reached through create_and_run_agent only
		agents = slices.DeleteFunc(agents, func(a registry.Agent) bool { return a.AgentType == s.DynamicType })
	}
	return agents, nil
}

// subAgentToolNames names the tools of s, for an unknown tool's answer.
func (r *Run) subAgentToolNames(agents []registry.Agent, s SubAgents) []string {
	var names []string
	for _, d := range s.Delegates {
		names = append(names, cmpName(d))
	}
	if len(s.Delegates) == 0 {
		for _, a := range agents {
			names = append(names, subagent.TaskPrefix+a.AgentType)
		}
	}
	if s.DynamicType != "" && !subagent.IsDynamic(r.Input()) {
		names = append(names, subagent.DynamicTool)
	}
	return names
}

func cmpName(d Delegate) string {
	if d.Name != "" {
		return d.Name
	}
	return subagent.TaskPrefix + d.AgentType
}

// variables counts the variables an attempt sets (their step names).
type variables struct {
	mu sync.Mutex
	n  int
}

// Variables returns the run's variables: those of its input's "variables"
// object (a caller's, see RunSubAgent), with the changes the run made
// (SetVariable, and its completed sub-agents'), earlier attempts' included.
func (r *Run) Variables(ctx context.Context) (map[string]json.RawMessage, error) {
	vars := subagent.InputVariables(r.Input())
	steps, err := r.Steps(ctx)
	if err != nil {
		return nil, err
	}
	changed, _ := subagent.Changes(steps)
	maps.Copy(vars, changed)
	return vars, nil
}

// SetVariable sets the run's variable key to value (JSON-encoded), stored
// as a durable step, so a later attempt sees it. When the run is a
// sub-agent, its caller gets the variables it changed once it completes.
func (r *Run) SetVariable(ctx context.Context, key string, value any) error {
	if key == "" {
		return errors.New("worker: set variable: empty key")
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("worker: set variable %s: encode: %w", key, err)
	}
	r.vars.mu.Lock()
	r.vars.n++
	n := r.vars.n
	r.vars.mu.Unlock()
	_, err = r.Step(ctx, subagent.VariableStep(r.Attempt(), n), func(context.Context) (any, error) {
		return subagent.Assignment{Key: key, Value: raw}, nil
	})
	return err
}

// takeVariables makes the variables the completed child changed this
// run's, those that differ from its own.
func (r *Run) takeVariables(ctx context.Context, child *jetruntype.Run) error {
	e, ok := r.b.(*execution)
	if !ok || child == nil {
		return nil
	}
	w := e.w
	steps, err := subagent.ReadSteps(ctx, w.rt.EventsStreamFor(child.ID), w.ns.RunSubject(child.ID, events.KindStep), child.FirstEventSeq)
	if err != nil {
		return fmt.Errorf("worker: run %s: read the variables of child %s: %w", r.ID(), child.ID, err)
	}
	changed, keys := subagent.Changes(steps)
	if len(keys) == 0 {
		return nil
	}
	mine, err := r.Variables(ctx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if have, ok := mine[k]; ok && string(have) == string(changed[k]) {
			continue
		}
		if err := r.SetVariable(ctx, k, changed[k]); err != nil {
			return err
		}
	}
	return nil
}
