// Package parent is the parent side of jetrun: dispatch runs, await them,
// inspect, list, replay, signal and cancel them, and answer their calls.
// One door per verb: [Client.Dispatch] (and [Client.DispatchMany] for
// batches), [Client.Run] and [Client.Await], [Client.Inspect] and
// [Client.List] (which read through the read-only face,
// [github.com/jetrun/jetrun/pkg/kv]), [Client.Replay], [Client.Signal],
// [Client.Cancel], [Client.Answer].
//
// Invariants:
//   - Idempotent by run id. Dispatch creates the row with a compare-and-set
//     create; the same id again never starts a second execution: a live run
//     is re-attached, a finished one returns its stored outcome.
//   - Nothing waits forever to start: a dispatch that cannot be published
//     ends the run "error" (reason "dispatch-failed"), and a caller that
//     dies mid-dispatch leaves a dispatch a worker takes, or a "starting"
//     row whose dispatch the reconciler (or a new Dispatch of the id)
//     publishes.
//   - DispatchMany is Dispatch of each request, pipelined: a bounded
//     number in flight, one result per request, a bad one failing alone.
//   - Awaiting watches the row; a parent that dies while awaiting loses
//     nothing: Run with the same id later collects the real result.
//   - A replay yields a run's events in order without gap or duplicate,
//     across transient faults.
//   - Cancel is durable (recorded on the row), idempotent, and never rewrites
//     a final status.
//   - [RunID] derives a stable id from (parent, tool call id), so a
//     re-issued tool call re-attaches instead of running twice.
//   - Calls ([CallServer]) are served from one durable consumer per call
//     name: a call's reply is stored (jetrun.run.<id>.reply, deduplicated
//     by <id>.reply.<seq>) before the call is acknowledged, a call with a
//     reply is never handed to a handler again, and the first reply stored
//     is the answer. A handler runs at least once per call.
package parent
