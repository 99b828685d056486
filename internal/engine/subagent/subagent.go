// Package subagent holds the sub-agent patterns agent frameworks ship (AG2's
// subagents), in jetrun's terms: delegate tools named task_<agent> whose
// arguments are an objective and an optional context, dynamic agents made
// from a spec by one tool, create_and_run_agent, and variables a child
// changes, returned to its parent on success. It builds the tool
// definitions, parses a model's tool call into the input of a nested run,
// and reads what a child stored; package worker runs the nested runs.
//
// Nothing here writes: a delegated run is an ordinary nested run (its id
// derived from the caller's tool call id, so a retried call re-attaches),
// and a variable is an ordinary durable step of the run that sets it
// (named "variables.<attempt>.<n>"), so both survive crashes as runs and
// steps do.
package subagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/pkg/events"
)

// TaskPrefix prefixes the name of an agent type's delegate tool.
const TaskPrefix = "task_"

// DynamicTool is the name of the tool that creates and runs a dynamic agent.
const DynamicTool = "create_and_run_agent"

// Delegate offers an agent type as a delegate tool. Name defaults to
// task_<AgentType>, Description to one naming the agent type (or the
// type's own description).
type Delegate struct {
	AgentType   string
	Name        string
	Description string
	// Session, when set, makes the delegate persistent: its runs are turns
	// of this session and see the earlier ones as their history.
	Session string
}

// Input is the input of a delegated or dynamic run: what its handler
// decodes.
type Input struct {
	// Objective is what the sub-agent is asked to do. Always set.
	Objective string `json:"objective"`
	// Context is what the caller adds, optional.
	Context string `json:"context,omitempty"`
	// Variables are the caller's variables when it delegated.
	Variables map[string]json.RawMessage `json:"variables,omitempty"`
	// Spec is set for a dynamic agent only: what it is.
	Spec *Spec `json:"spec,omitempty"`
}

// Spec describes a dynamic agent, the spec of create_and_run_agent.
type Spec struct {
	// Name names the agent (for people and logs).
	Name string `json:"name"`
	// Prompt is its system prompt.
	Prompt string `json:"prompt"`
	// Tools are the names of the tools it may use, from the caller's pool.
	Tools []string `json:"tools,omitempty"`
	// ResponseSchema, optional, is the JSON Schema its output must match.
	ResponseSchema json.RawMessage `json:"responseSchema,omitempty"`
}

// taskSchema is the parameters schema of a delegate tool.
const taskSchema = `{"type":"object","properties":{` +
	`"objective":{"type":"string","description":"What the sub-agent must achieve."},` +
	`"context":{"type":"string","description":"What the sub-agent needs to know that the objective does not say."}},` +
	`"required":["objective"],"additionalProperties":false}`

// dynamicSchema is the parameters schema of create_and_run_agent; pool
// lists the tools a spec may name.
func dynamicSchema(pool []string) json.RawMessage {
	tools, _ := json.Marshal(map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": nonNil(pool)},
		"description": "Tools the agent may use, from the pool."})
	return json.RawMessage(`{"type":"object","properties":{` +
		`"spec":{"type":"object","properties":{` +
		`"name":{"type":"string"},"prompt":{"type":"string","description":"The agent's system prompt."},` +
		`"tools":` + string(tools) + `,` +
		`"responseSchema":{"type":"object","description":"Optional JSON Schema of the agent's answer."}},` +
		`"required":["name","prompt"]},` +
		`"objective":{"type":"string"},"context":{"type":"string"}},` +
		`"required":["spec","objective"],"additionalProperties":false}`)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Tools returns the tool definitions, in format (registry.Tools' formats),
// of delegates (each of agents when delegates is empty) and, when dynamic,
// of create_and_run_agent with pool as its tools.
func Tools(agents []registry.Agent, delegates []Delegate, dynamic bool, pool []string, format string) (any, error) {
	if len(delegates) == 0 {
		for _, a := range agents {
			delegates = append(delegates, Delegate{AgentType: a.AgentType})
		}
	}
	described := make(map[string]string, len(agents))
	for _, a := range agents {
		described[a.AgentType] = a.Description
	}
	var defs []registry.Agent
	for _, d := range delegates {
		d = withDefaults(d, described[d.AgentType])
		defs = append(defs, registry.Agent{AgentType: d.Name, Description: d.Description, InputSchema: json.RawMessage(taskSchema)})
	}
	if dynamic {
		defs = append(defs, registry.Agent{AgentType: DynamicTool, InputSchema: dynamicSchema(pool),
			Description: "Create an agent from a spec (a name, a prompt, tools from the pool, an optional response schema) and run it on an objective; returns its answer."})
	}
	return registry.Tools(defs, format)
}

// withDefaults fills d's name and description.
func withDefaults(d Delegate, described string) Delegate {
	if d.Name == "" {
		d.Name = TaskPrefix + d.AgentType
	}
	if d.Description == "" {
		d.Description = described
	}
	if d.Description == "" {
		d.Description = "Delegate a task to the " + d.AgentType + " agent: give it an objective and, optionally, context."
	}
	return d
}

// DelegateOf returns the delegate whose tool is called name: the one of
// delegates named so, else task_<type> for a type of agents when delegates
// is empty.
func DelegateOf(name string, agents []registry.Agent, delegates []Delegate) (Delegate, bool) {
	for _, d := range delegates {
		if withDefaults(d, "").Name == name {
			return d, true
		}
	}
	if len(delegates) > 0 || !strings.HasPrefix(name, TaskPrefix) {
		return Delegate{}, false
	}
	t := strings.TrimPrefix(name, TaskPrefix)
	found := slices.ContainsFunc(agents, func(a registry.Agent) bool { return a.AgentType == t })
	return Delegate{AgentType: t}, found
}

// ParseTask decodes a delegate tool's arguments; the error, for the model,
// says what is wrong.
func ParseTask(args json.RawMessage) (Input, error) {
	var in Input
	if err := json.Unmarshal(args, &in); err != nil {
		return Input{}, fmt.Errorf("arguments are not a JSON object with objective and context: %v", err)
	}
	if strings.TrimSpace(in.Objective) == "" {
		return Input{}, errors.New("objective is required")
	}
	in.Spec, in.Variables = nil, nil
	return in, nil
}

// ParseDynamic decodes create_and_run_agent's arguments and checks the
// spec against pool; the error, for the model, says what is wrong (an
// unknown tool is named with the pool).
func ParseDynamic(args json.RawMessage, pool []string) (Input, error) {
	var in Input
	if err := json.Unmarshal(args, &in); err != nil {
		return Input{}, fmt.Errorf("arguments are not a JSON object with spec and objective: %v", err)
	}
	var errs []error
	if strings.TrimSpace(in.Objective) == "" {
		errs = append(errs, errors.New("objective is required"))
	}
	switch {
	case in.Spec == nil:
		errs = append(errs, errors.New("spec is required"))
	default:
		if strings.TrimSpace(in.Spec.Name) == "" {
			errs = append(errs, errors.New("spec.name is required"))
		}
		if strings.TrimSpace(in.Spec.Prompt) == "" {
			errs = append(errs, errors.New("spec.prompt is required"))
		}
		for _, t := range in.Spec.Tools {
			if !slices.Contains(pool, t) {
				errs = append(errs, fmt.Errorf("unknown tool %q: choose from the pool [%s]", t, strings.Join(pool, ", ")))
			}
		}
		if _, err := registry.Compile(in.Spec.ResponseSchema); err != nil {
			errs = append(errs, fmt.Errorf("spec.responseSchema: %v", err))
		}
	}
	in.Variables = nil
	return in, errors.Join(errs...)
}

// IsDynamic reports whether input is a dynamic agent's: it carries a spec.
func IsDynamic(input json.RawMessage) bool {
	var in struct {
		Spec json.RawMessage `json:"spec"`
	}
	return json.Unmarshal(input, &in) == nil && len(in.Spec) > 0 && string(in.Spec) != "null"
}

// VariablePrefix prefixes the names of the steps that set variables.
const VariablePrefix = "variables."

// VariableStep names the n-th variable a run's attempt sets.
func VariableStep(attempt, n int) string {
	return VariablePrefix + strconv.Itoa(attempt) + "." + strconv.Itoa(n)
}

// Assignment is the output of a variable step.
type Assignment struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// Changes returns the variables steps set, in the order stored (the last
// assignment of a key wins), and the keys in the order first set.
func Changes(steps []events.Step) (vars map[string]json.RawMessage, keys []string) {
	vars = map[string]json.RawMessage{}
	for _, st := range steps {
		if !strings.HasPrefix(st.Name, VariablePrefix) || st.Error != "" {
			continue
		}
		var a Assignment
		if json.Unmarshal(st.Output, &a) != nil || a.Key == "" {
			continue
		}
		if _, ok := vars[a.Key]; !ok {
			keys = append(keys, a.Key)
		}
		vars[a.Key] = a.Value
	}
	return vars, keys
}

// InputVariables returns the variables of a run's input (none when it
// has no "variables" object).
func InputVariables(input json.RawMessage) map[string]json.RawMessage {
	var in struct {
		Variables map[string]json.RawMessage `json:"variables"`
	}
	_ = json.Unmarshal(input, &in)
	if in.Variables == nil {
		return map[string]json.RawMessage{}
	}
	return in.Variables
}
