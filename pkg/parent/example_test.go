package parent_test

import (
	"fmt"

	"github.com/jetrun/jetrun/pkg/parent"
)

// A parent that re-issues the same tool call after a restart derives the
// same run id, so it re-attaches instead of starting a duplicate.
func ExampleRunID() {
	first := parent.RunID("support-agent-7", "call_abc123")
	again := parent.RunID("support-agent-7", "call_abc123")
	fmt.Println(first == again, len(first) <= 64)
	// Output: true true
}
