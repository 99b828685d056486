// Package engine is what the roles of a process share behind the public
// jetrun.Runtime: the bound streams and the run store, and the writers
// several roles use (a run's dispatch, a transition's status event, an
// owed finish or notice, resuming and erasing a run, repair). Package
// jetrun opens it; the roles reach it with From.
//
// The engine's features each have a home below it: model (a row's
// transitions and delivery ledger), keys (concurrency keys), calls (a run's calls and replies), budget (run
// trees' budgets), runstore
// (rows, the active index, leases, key queues), wire (names, message ids,
// replay on JetStream), reconcile, registry, and the consumer kit (pull,
// settle, service).
package engine
