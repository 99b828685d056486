package registry_test

import (
	"encoding/json"
	"fmt"

	"github.com/jetrun/jetrun/internal/engine/registry"
)

func ExampleTools() {
	agents := []registry.Agent{{
		AgentType:   "wordcount",
		Description: "Counts the words of a text.",
		InputSchema: json.RawMessage(`{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`),
		Workers:     2,
	}}
	tools, _ := registry.Tools(agents, registry.FormatAnthropic)
	out, _ := json.Marshal(tools)
	fmt.Println(string(out))
	// Output:
	// [{"name":"wordcount","description":"Counts the words of a text.","input_schema":{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}}]
}

func ExampleSchema_Validate() {
	s, _ := registry.Compile(json.RawMessage(`{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`))
	fmt.Println(s.Validate(json.RawMessage(`{"text":"hello"}`)))
	fmt.Println(s.Validate(json.RawMessage(`{"text":5}`)))
	// Output:
	// <nil>
	// does not match the schema: at '/text': got number, want string
}
