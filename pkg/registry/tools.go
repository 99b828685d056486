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
	params := func(a Agent) json.RawMessage {
		switch {
		case len(a.InputSchema) == 0:
			return anyObject
		case isObjectSchema(a.InputSchema):
			return a.InputSchema
		}
		// Tool APIs want an object: wrap the input as its field "input".
		return json.RawMessage(`{"type":"object","properties":{"input":` + string(a.InputSchema) + `},"required":["input"]}`)
	}
	desc := func(a Agent) string {
		if a.Description != "" {
			return a.Description
		}
		return "Run the jetrun agent " + a.AgentType + "."
	}
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
			t := tool{Name: a.AgentType, Description: desc(a), InputSchema: params(a)}
			if isObjectSchema(a.OutputSchema) {
				t.OutputSchema = a.OutputSchema
			}
			out = append(out, t)
		}
		return map[string]any{"tools": out}, nil
	}
	return nil, fmt.Errorf("%w %q: use openai, anthropic or mcp", ErrUnknownFormat, format)
}

// isObjectSchema reports whether raw is a schema of "type": "object" (MCP
// output schemas must be).
func isObjectSchema(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	return len(raw) > 0 && json.Unmarshal(raw, &s) == nil && s.Type == "object"
}
