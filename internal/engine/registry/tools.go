package registry

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Tool definition formats accepted by Tools.
const (
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
	FormatMCP       = "mcp"
)

// ErrUnknownFormat is returned by Tools for a format it does not know.
var ErrUnknownFormat = errors.New("unknown tool format")

// anyObject is the parameters schema of an agent type without an input
// schema: LLM tool APIs want an object.
var anyObject = json.RawMessage(`{"type":"object","additionalProperties":true}`)

// Tools returns LLM tool definitions for agents, one per agent type, named
// after it, described by its description, with its input schema as the
// parameters (a type without one takes any object): the arguments a model
// produces are the dispatch's input. An input schema that is not an object
// schema ("type": "object") is wrapped as the field "input" of an object,
// and the dispatch's input is then that field of the arguments.
//
//   - openai: a list for the Chat Completions / Responses "tools" field,
//     [{"type":"function","function":{"name","description","parameters"}}];
//   - anthropic: a list for the Messages API "tools" field,
//     [{"name","description","input_schema"}];
//   - mcp: a tools/list result, {"tools":[{"name","description","inputSchema","outputSchema"}]}
//     (outputSchema only for a type that announces an object schema).
func Tools(agents []Agent, format string) (any, error) {
	params := func(a Agent) json.RawMessage { return ToolOf(a).InputSchema }
	desc := func(a Agent) string { return ToolOf(a).Description }
	switch format {
	case FormatOpenAI, "":
		type fn struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		type tool struct {
			Type     string `json:"type"`
			Function fn     `json:"function"`
		}
		out := make([]tool, 0, len(agents))
		for _, a := range agents {
			out = append(out, tool{Type: "function", Function: fn{Name: a.AgentType, Description: desc(a), Parameters: params(a)}})
		}
		return out, nil
	case FormatAnthropic:
		type tool struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		out := make([]tool, 0, len(agents))
		for _, a := range agents {
			out = append(out, tool{Name: a.AgentType, Description: desc(a), InputSchema: params(a)})
		}
		return out, nil
	case FormatMCP:
		type tool struct {
			Name         string          `json:"name"`
			Description  string          `json:"description"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
		}
		out := make([]tool, 0, len(agents))
		for _, a := range agents {
			t := ToolOf(a)
			out = append(out, tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema})
		}
		return map[string]any{"tools": out}, nil
	}
	return nil, fmt.Errorf("%w %q: use openai, anthropic or mcp", ErrUnknownFormat, format)
}

// Tool is an agent type as an LLM tool: what Tools lists for it.
type Tool struct {
	// Name is the agent type.
	Name string
	// Description is the type's, or a sentence naming the type.
	Description string
	// InputSchema is the schema of the tool's arguments: the type's input
	// schema when it is an object schema, any object when the type has
	// none, else an object whose field "input" is the type's input
	// (Wrapped).
	InputSchema json.RawMessage
	// Wrapped says the dispatch's input is the arguments' field "input".
	Wrapped bool
	// OutputSchema is the type's output schema when it is an object schema
	// (MCP wants one), else empty.
	OutputSchema json.RawMessage
}

// ToolOf returns agent type a as an LLM tool.
func ToolOf(a Agent) Tool {
	t := Tool{Name: a.AgentType, Description: a.Description, InputSchema: a.InputSchema}
	if t.Description == "" {
		t.Description = "Run the jetrun agent " + a.AgentType + "."
	}
	switch {
	case len(a.InputSchema) == 0:
		t.InputSchema = anyObject
	case !isObjectSchema(a.InputSchema):
		// Tool APIs want an object: wrap the input as its field "input".
		t.InputSchema = json.RawMessage(`{"type":"object","properties":{"input":` + string(a.InputSchema) + `},"required":["input"]}`)
		t.Wrapped = true
	}
	if isObjectSchema(a.OutputSchema) {
		t.OutputSchema = a.OutputSchema
	}
	return t
}

// isObjectSchema reports whether raw is a schema of "type": "object" (MCP
// output schemas must be).
func isObjectSchema(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	return len(raw) > 0 && json.Unmarshal(raw, &s) == nil && s.Type == "object"
}
