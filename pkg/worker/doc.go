// Package worker is jetrun's child runtime: a Worker pulls the dispatches of
// the agent types it has handlers for, claims their runs, calls the handlers
// with a Run handle (input, chunks, progress, milestones, durable steps,
// usage, signals, parking, cancellation) and writes their outcomes.
//
// New builds a Worker on the process's jetrun.Runtime, Handle and
// HandleFunc register a handler per agent type, Start starts pulling and
// Shutdown stops it gracefully. The examples show it: Example serves an
// agent type and runs it from a parent in one process, Example_serve is a
// worker process, ExampleStep and ExampleRun_Usage show durable steps and
// usage; package workertest tests a handler without a server.
//
// # What a run costs
//
// A run in flight costs its worker the handler's goroutine and its state in
// memory, and the server nothing of its own: the worker's liveness is one
// key renewed every third of a lease, cancels and signals reach the
// process through one ordered consumer each, and one goroutine (the
// heart) sends InProgress on every held dispatch and writes rows that have
// changes pending. docs/leases.md explains the choice.
//
// # Invariants
//
//   - Claim. A run is executed only after a compare-and-set of its row names
//     this worker, its liveness epoch and the next attempt; a dispatch without
//     a row is claimed by creating the row claimed. The execution is
//     registered before the claim, so a cancel that arrives right after it
//     finds the run.
//   - Who acks. Every delivery is settled in one place with an outcome
//     (internal/settle): process returns one and the fetch loop applies
//     it, or, once an attempt holds the delivery, the execution settles all
//     the deliveries it holds when the attempt ends (releaseMsgs); a settle
//     that fails is logged once. While the run lives its dispatch stays
//     un-acknowledged (it is the wake-up for a takeover if the worker dies)
//     and is only heartbeat (InProgress). It is acknowledged once the run is
//     final and its final status event is stored (after the final write,
//     never before), or when the run is cleared, interrupted or queued
//     behind its key; it is Nak'ed at once on a hand-back (shutdown, a
//     lapse the worker came back from) and after a delay after a start
//     failure, a retry, a fault, or while another worker holds the run; it
//     is terminated once it is dead-lettered (stored in the DLQ); it is left
//     alone when the attempt lost the run (the new holder owns it) or its
//     final status event could not be stored (the redelivery repairs it).
//   - Fencing. Every row write checks worker and attempt on the row it
//     writes (compare-and-set). Every event carries the expected last
//     sequence of the run's status subject, so once another attempt's status
//     event is stored no event of this attempt is (publisher). An attempt that
//     is fenced cancels its handler with ErrLeaseLost and writes nothing more.
//   - Durability. Chunks and progress are pipelined; Milestone returns once
//     stored; every event of an attempt is stored before its run is written
//     final. Usage is coalesced into the row like progress (a kill -9 loses
//     the reports of the last row-sync interval); in a tree with a budget
//     every report is charged to the budget before Usage returns (usage.go).
//   - Liveness. When the worker cannot renew its liveness key before it
//     would expire, every attempt is stopped (ErrLeaseLost) and a new epoch
//     begins; runs of the old epoch are taken over by others.
//   - Faults. Transient JetStream faults (no answer, a timeout, a leader
//     election, a disconnect; classified by jsfault) are retried with
//     backoff for as long as the worker holds its runs; only then does an
//     attempt stop and its run go to another worker. A handler sees only
//     what is permanent (fenced, cancelled, oversize), never a transient
//     fault. A start that fails on the infrastructure is a hand-off, not a
//     lost worker (max-attempts counts lost workers only). Fault warnings
//     are written at most once per 10 s per message and class.
//   - Slots. A run holds a concurrency slot of its agent type while it
//     executes, except while parked (Run.Wait, Run.Park, Run.RunChild,
//     Child.Await, Run.Call).
//   - Nested runs. Run.Spawn and Run.RunChild dispatch a child linked to
//     the run (parent, depth + 1, parentToolCallId) under an id derived
//     from the run id and the call id, so an attempt that starts the same
//     child again (a takeover) re-attaches to it: never a second child.
//     Forwarded child chunks are child-chunk events on the parent's
//     subjects, fenced like its own events, deduplicated by the child's
//     chunk sequence.
//   - Steps. Run.Step stores a step's output (fenced, acknowledged) before
//     it returns; an attempt after the first reads the run's stored steps
//     once, at its first Step, and returns them instead of running their
//     work again, so a stored step never runs twice and one interrupted by
//     a crash runs at most twice (step.go). A first attempt reads nothing.
//   - Calls. Run.Call stores the request on the run's call subject before
//     waiting, numbered per attempt in call order; an attempt finds the
//     calls and replies of earlier ones, so a call is never asked twice
//     and a reply never lost (call.go).
//
// # An attempt's parts
//
// An attempt (execution.go) is composed of parts, each owning its state
// under one lock that it never holds while it calls out (I/O, another
// part, a callback): a part that needs another's state is given a value
// by its caller, and the heart asks each part for a snapshot and acts on
// it outside any lock.
//
//	attemptCtl   the handler's context and cancel, begun/ended, the lapse mark (ctl.go)
//	rowWriter    the newest row known, the fields awaiting the next row write,
//	             the dirty mark and the sync clock (row.go)
//	emitter      event numbering and the flush timer (emit.go)
//	deliveries   the dispatch's deliveries, their heartbeat or shelving, and
//	             release (deliveries.go)
//	parking      the concurrency slot while the handler is parked (parking.go)
//
// The row writer and the emitter let one write or numbered publish through
// at a time with a one-slot turn taken with the caller's context, so their
// order is kept without a lock held across the round trip. The publisher
// (publisher.go), the usage (usage.go) and the nested runs and calls
// (nested.go, call.go) keep locks of their own; Worker.mu guards the active
// set, the lapse and the liveness key and is a leaf.
//
// # Files
//
// worker.go (Worker, Start, Shutdown), dispatch.go (one delivery: claim or
// act on the row), settle.go (settling deliveries), keys.go (concurrency
// keys), execution.go (an attempt: claim to handler call), ctl.go,
// row.go, emit.go, deliveries.go and parking.go (its parts),
// publisher.go (fenced, pipelined publishes), heart.go (liveness,
// heartbeats, row sync), shelf.go (waiting runs' dispatches shelved, and
// lost workers' shelved runs taken up), outcome.go (how an attempt ends: final write,
// hand-back, release, abandon), retry.go, cancels.go (cancels and signals),
// nested.go and call.go (nested runs and calls), step.go (durable steps),
// run.go (the handler-facing Run and its backend: the execution, or
// workertest's recorder).
package worker
