// Package parent is the parent side of jetrun: dispatch runs, await them,
// inspect, list and cancel them.
//
// Invariants:
//   - Idempotent by run id. Dispatch creates the row with a compare-and-set
//     create; the same id again never starts a second execution: a live run
//     is re-attached, a finished one returns its stored outcome.
//   - Nothing waits forever to start: the dispatch is published first
//     (Nats-Msg-Id = run id, bounded retries), the row second; a caller that
//     dies between the two leaves a dispatch whose worker writes the row. A
//     publish that keeps failing returns ErrDispatchFailed and writes
//     nothing.
//   - Awaiting watches the row; a parent that dies while awaiting loses
//     nothing: Run with the same id later collects the real result.
//   - Cancel is durable (recorded on the row), idempotent, and never rewrites
//     a final status.
//   - RunID derives a stable id from (parent, tool call id), so a re-issued
//     tool call re-attaches instead of running twice.
package parent
