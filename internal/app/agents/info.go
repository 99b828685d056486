package agents

import (
	"encoding/json"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/pkg/worker"
)

// builtinInfo describes the built-in agent types in the agent registry.
var builtinInfo = map[string]worker.AgentInfo{
	demo.AgentType: {
		Description: "A simulated researcher: streams a chunk, reaches a milestone (step-1, step-2, …) and reports " +
			"progress at every step, whose research is a durable step (lead-1, lead-2, …) reporting simulated token " +
			"usage; optionally fails at a step, waits for the signal \"approve\" before one, or delegates to nested demo runs.",
		InputSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "steps": {"type": "integer", "minimum": 0, "maximum": 100000, "description": "number of steps (default 5)"},
    "stepMs": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "milliseconds per step (default 200)"},
    "failAt": {"type": "integer", "minimum": 0, "description": "fail at this step (0: never)"},
    "approveAt": {"type": "integer", "minimum": 0, "description": "wait for the signal approve before this step (0: never)"},
    "children": {"type": "integer", "minimum": 0, "maximum": 20, "description": "after the steps, run this many nested demo runs of 2 steps (tool call delegate)"}
  },
  "additionalProperties": false
}`),
		OutputSchema: json.RawMessage(`{
  "type": "object",
  "required": ["steps", "stepsRunHere", "attempt"],
  "properties": {
    "steps": {"type": "integer"},
    "stepsRunHere": {"type": "integer"},
    "attempt": {"type": "integer"},
    "children": {"type": "integer"}
  }
}`),
	},
}
