// Package jetruntype is jetrun's run model: the run row (Run), the state
// machine of its status (End, Interrupt, Resume, RequestCancel) and the
// delivery ledger of a detached run's finishes and milestone notices
// (ledger.go). It is a leaf package, like River's rivertype: it imports
// only events, does no I/O, and every change it makes is a plain method on
// a row that the caller writes with a compare-and-set (kv.Store.Mutate).
package jetruntype
