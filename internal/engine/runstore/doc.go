// Package runstore stores run rows in a JetStream key-value bucket (jetrun_runs,
// key = run id, History 1).
//
// Invariants:
//   - The row is the authority on a run's state. Every write is a
//     compare-and-set on the row's revision (Update, Mutate); conflicts are
//     detected with jetstream.ErrKeyRevisionMismatch, which also covers the
//     error code replicated buckets report, and surface as ErrConflict.
//   - Create is the long-horizon idempotency key: a run id is created once.
//   - Mutate functions must be idempotent, because a write whose
//     acknowledgement was lost is retried against the row that already holds
//     it.
//   - Final statuses (completed, error, aborted) are never left: a Mutate
//     function changes a row by model events (model.Apply), which a final
//     row does not take, and Mutate itself refuses a result that leaves a
//     final status (ErrFinal); the compare-and-set makes that check
//     race-free. The one exception, the repair of a row rewritten without
//     the compare-and-set, is RewriteFinal.
//
// JetStream errors are translated here, at the boundary: callers test the
// sentinels of this package with errors.Is.
package runstore
