// Package model is the run row's behaviour: the state machine of its
// status, the delivery ledger of a detached run's finishes and milestone
// notices (ledger.go) and the charges of a tree's budgets (usage.go).
// It does no I/O: a row changes by an event (apply.go, marks.go: Claimed,
// Ended, GaveUp, Resumed, …) applied with Apply, which the caller writes
// with a compare-and-set (runstore.Store.Mutate, model.Mutation), so
// transitions are table-tested and fuzzed without a server; Check states
// the invariants every transition keeps.
//
// A Row is a jetruntype.Run, the read-only row users see, with these
// methods: Of and Row.Run convert a pointer either way for free.
package model

import "github.com/jetrun/jetrun/pkg/jetruntype"

// Row is a run's row with its transitions.
type Row jetruntype.Run

// Of returns r as a Row (the same row, not a copy); nil stays nil.
func Of(r *jetruntype.Run) *Row { return (*Row)(r) }

// Run returns r as the public row type (the same row, not a copy).
func (r *Row) Run() *jetruntype.Run { return (*jetruntype.Run)(r) }

// Live reports whether the run may still make progress.
func (r *Row) Live() bool { return r.Run().Live() }

// Failure returns the run's failure value, or nil if it completed or is
// still live.
func (r *Row) Failure() *jetruntype.Failure { return r.Run().Failure() }
