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
//
// With "limit": "<name>" the reservation also waits for room on that
// provider limit, shared by the fleet (worker.Limit); an empty amount then
// reserves one request and one call slot. A limit no one configured is an
// answer: reason "unknown-limit", the error naming the configured ones. A
// provider's 429 is an error line with "retryable": true and
// "retryAfterMs": the limits the run reserved on pause that long for the
// whole fleet.
const KindReserve = "reserve"

// ReasonUnknownLimit is the reason of a reserve answer that names a limit
// no one configured.
const ReasonUnknownLimit = "unknown-limit"

// Reserved answers a reserve line.
type Reserved struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"` // "budget-exceeded" when refused
	Error  string `json:"error,omitempty"`
}

// parseReserve decodes the value of a reserve line.
func parseReserve(raw json.RawMessage) (events.UsageReport, string, string) {
	const want = `"reserve" must be an object {"inputTokens": n, "outputTokens": n, "costMicros": n, "limit": "name"}`
	var r struct {
		events.UsageReport
		Limit string `json:"limit"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || string(raw) == "null" {
		return r.UsageReport, "", want
	}
	if r.Limit != "" {
		if err := events.ValidateToken("limit name", r.Limit); err != nil {
			return r.UsageReport, "", fmt.Sprintf(`"reserve.limit": %v`, err)
		}
		if r.UsageReport == (events.UsageReport{}) {
			return r.UsageReport, r.Limit, "" // a request and a call slot
		}
	}
	if err := events.ValidateReserve(r.UsageReport); err != nil {
		return r.UsageReport, "", fmt.Sprintf(`"reserve": %v`, err)
	}
	return r.UsageReport, r.Limit, ""
}

// DoReserve makes the reservation ev asks for and returns its answer; a
// refusal is an answer. The error is what ends the attempt (a cancel, a
// lost lease, a fault).
func DoReserve(ctx context.Context, run *worker.Run, ev Event) (Reserved, error) {
	var opts []worker.ReserveOption
	if ev.ReserveLimit != "" {
		opts = append(opts, worker.Limit(ev.ReserveLimit))
	}
	_, err := run.Reserve(ctx, ev.Reserve, opts...)
	switch {
	case errors.Is(err, worker.ErrBudgetExceeded):
		return Reserved{Reason: events.ReasonBudgetExceeded, Error: err.Error()}, nil
	case errors.Is(err, worker.ErrUnknownLimit):
		return Reserved{Reason: ReasonUnknownLimit, Error: err.Error()}, nil
	case err != nil:
		return Reserved{}, err
	}
	return Reserved{OK: true}, nil
}
