package eventline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// KindReserve reserves spend before it is paid (worker.Run.Reserve):
// {"reserve": {"inputTokens": n, "outputTokens": n, "costMicros": n}}. The
// child reads the answer like a call's reply (exec: a stdin line
// {"reserved": {...}}; http: the next request's "reserved"): ok, or refused
// with reason "budget-exceeded" and an error saying which budget. The
// run's next usage line settles what it holds; the end of the child's
// attempt releases what no usage line settled. A negative, empty or absurd
// amount (events.ValidateReserve) breaks the format: nothing is reserved.
const KindReserve = "reserve"

// Reserved answers a reserve line.
type Reserved struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"` // "budget-exceeded" when refused
	Error  string `json:"error,omitempty"`
}

// parseReserve decodes the value of a reserve line.
func parseReserve(raw json.RawMessage) (events.UsageReport, string) {
	const want = `"reserve" must be an object {"inputTokens": n, "outputTokens": n, "costMicros": n}`
	var u events.UsageReport
	if err := json.Unmarshal(raw, &u); err != nil || string(raw) == "null" {
		return u, want
	}
	if err := events.ValidateReserve(u); err != nil {
		return u, fmt.Sprintf(`"reserve": %v`, err)
	}
	return u, ""
}

// DoReserve makes the reservation ev asks for and returns its answer; a
// refusal is an answer. The error is what ends the attempt (a cancel, a
// lost lease, a fault).
func DoReserve(ctx context.Context, run *worker.Run, ev Event) (Reserved, error) {
	_, err := run.Reserve(ctx, ev.Reserve)
	switch {
	case errors.Is(err, worker.ErrBudgetExceeded):
		return Reserved{Reason: events.ReasonBudgetExceeded, Error: err.Error()}, nil
	case err != nil:
		return Reserved{}, err
	}
	return Reserved{OK: true}, nil
}
