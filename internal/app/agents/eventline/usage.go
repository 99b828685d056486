package eventline

import (
	"encoding/json"
	"fmt"

	"github.com/jetrun/jetrun/pkg/events"
)

// KindUsage is a usage event: {"usage": {"inputTokens": n, "outputTokens":
// n, "costMicros": n, "model": "…"}}, every field optional; reports add up
// on the run's row (worker.Run.Usage).
const KindUsage = "usage"

// parseUsage decodes the value of a usage event.
func parseUsage(raw json.RawMessage) (events.UsageReport, string) {
	const want = `"usage" must be an object {"inputTokens": n, "outputTokens": n, "costMicros": n, "model": "…"}`
	var u events.UsageReport
	if err := json.Unmarshal(raw, &u); err != nil || string(raw) == "null" {
		return u, want
	}
	if err := u.Validate(); err != nil {
		return u, fmt.Sprintf(`"usage": %v`, err)
	}
	return u, ""
}
