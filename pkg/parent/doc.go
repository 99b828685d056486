// Package parent is the parent side of jetrun: dispatch runs, await them,
// inspect, list and cancel them.
//
// Invariants:
//   - Idempotent by run id. Dispatch creates the row with a compare-and-set
//     create; the same id again never starts a second execution: a live run
//     is re-attached, a finished one returns its stored outcome.
//   - Nothing waits forever to start: the row is created "starting", then
//     the dispatch is published (Nats-Msg-Id = run id) with bounded retries;
//     if that fails the row ends "error" (reason "dispatch-failed"). A
//     caller that dies between the two leaves a "starting" row whose
//     dispatch the reconciler (or a new Dispatch of the id) publishes.
//   - DispatchMany is Dispatch of each request, pipelined: a bounded
//     number in flight, one result per request, a bad one failing alone.
//   - Awaiting watches the row; a parent that dies while awaiting loses
//     nothing: Run with the same id later collects the real result.
//   - Cancel is durable (recorded on the row), idempotent, and never rewrites
//     a final status.
//   - RunID derives a stable id from (parent, tool call id), so a re-issued
//     tool call re-attaches instead of running twice.
//   - Calls (CallServer) are served from one durable consumer per call
//     name: a call's reply is stored (jetrun.run.<id>.reply, deduplicated
//     by <id>.reply.<seq>) before the call is acknowledged, a call with a
//     reply is never handed to a handler again, and the first reply stored
//     is the answer. A handler runs at least once per call.
package parent
