// Package finish delivers the finishes of detached runs to named handlers.
//
// A detached run dispatched with detached.onFinish = "<handler>" owes one
// finish per status it reaches among completed, error, aborted and the
// give-up interrupted. Each transition records the owed finish on the run's
// row (its delivery ledger) and says so on its status event (header
// Jetrun-Finish-Owed); the finisher every Deliverer runs (finisher.go)
// publishes it to jetrun.finish.<handler> with Nats-Msg-Id
// <runId>.<status>, and the reconciler republishes any that were lost. A
// program that runs pkg/worker without parent-worker must run a Deliverer
// (with or without handlers) for finishes to be published promptly.
//
// Handlers are registered as on a net/http ServeMux: Handle(name, h) or
// HandleFunc(name, f) for finishes (a Handler's ServeFinish), and
// HandleMilestone / HandleMilestoneFunc for milestone notices (a
// MilestoneHandler's ServeMilestone). A Deliverer runs one durable consumer
// per handler (finish-<handler>), shared by every process that registers
// the handler. For each message it:
//
//  1. reads the row and acknowledges at once if the finish was delivered,
//     given up, or the run is gone;
//  2. claims the delivery with a compare-and-set on the row (attempts + 1,
//     claimed until now + Timeout), so two deliverers never invoke a handler
//     for the same finish at the same time;
//  3. invokes the handler, heartbeating the message while it runs;
//  4. on success marks delivered[status] with a compare-and-set, then acks;
//     on failure records the error and retries with exponential backoff
//     (NakWithDelay; after d for a handler's jetruntype.RetryAfter(err, d)),
//     and after MaxAttempts (at once for a handler's jetruntype.Cancel)
//     files the finish in the dead-letter stream, records the failure on
//     the row and stops.
//
// Delivery is therefore exactly once on the happy path and at least once
// under a crash: a deliverer that dies after the handler's side effect but
// before marking it delivered leaves a claim that expires, and the finish is
// delivered again. Handlers must be idempotent; Result's IdempotencyKey
// (<runId>.<status>) is the key to deduplicate on.
//
// Milestone notices (detached.onMilestones) travel the same way, on the
// same subject and consumer, with their own ledger slot per milestone name
// (jetruntype.Run.Notices) and the key <runId>.milestone.<name>; a deliverer also
// records them from the run's milestones and sends them before the run's
// finish. See notice.go and docs/delivery.md.
package finish
