// Package model is the run row's behaviour: the state machine of its
// status, the delivery ledger of a detached run's finishes and milestone
// notices (ledger.go) and the charges of a tree's budgets (usage.go).
// It does no I/O: a row changes by an event (apply.go, marks.go: Claimed,
// Ended, GaveUp, Resumed, …) applied with Apply, which the caller writes
// with a compare-and-set (runstore.Store.Mutate, model.Mutation), so
// transitions are table-tested and fuzzed without a server; Check states
// the invariants every transition keeps.
//
// A Row is the stored row, the engine's own: its JSON form is the value
// of the run's key in the runs bucket (docs/protocol.md). What a user
// reads of it is its view, a jetruntype.Run (Row.View, view.go), built
// where a role hands a row out; the engine decides on Rows only.
package model

import (
	"encoding/json"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Row is a run's stored row: the authoritative record of one child run,
// stored as JSON under its id in the runs bucket, with its transitions.
// Its JSON field names are the KV value format: they do not change.
type Row struct {
	ID               string           `json:"id"`
	AgentType        string           `json:"agentType"`
	Parent           string           `json:"parent,omitempty"`
	ParentToolCallID string           `json:"parentToolCallId,omitempty"`
	DisplayOrder     int              `json:"displayOrder,omitempty"`
	Depth            int              `json:"depth,omitempty"`
	Input            json.RawMessage  `json:"input,omitempty"`
	Detached         *events.Detached `json:"detached,omitempty"`
	// TraceParent and TraceState are the W3C trace context the run was
	// dispatched with (events.TraceContext), carried on its events and
	// finish.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`

	Status            events.Status   `json:"status"`
	Reason            string          `json:"reason,omitempty"`
	Error             string          `json:"error,omitempty"`
	Retryable         bool            `json:"retryable,omitempty"`
	ChildStillRunning bool            `json:"childStillRunning,omitempty"`
	Summary           string          `json:"summary,omitempty"`
	Output            json.RawMessage `json:"output,omitempty"`

	// Progress is the latest progress snapshot (without its data).
	Progress *jetruntype.ProgressSnapshot `json:"progress,omitempty"`
	// Milestones is the number of milestones reached, LastMilestone the
	// newest one's name.
	Milestones    int    `json:"milestones,omitempty"`
	LastMilestone string `json:"lastMilestone,omitempty"`
	// Chunks is the number of chunks streamed.
	Chunks int64 `json:"chunks,omitempty"`

	// Attempt counts claims: 1 for the first worker, +1 at every takeover.
	// Every write by a worker is fenced by it.
	Attempt int `json:"attempt,omitempty"`
	// Handoffs counts attempts handed back on graceful shutdown, released
	// after a fault, stopped by a lapse (Blinks), or given up and retried;
	// they do not count against the attempt limit. Each attempt counts
	// once: HandedOff is the last attempt counted.
	Handoffs  int `json:"handoffs,omitempty"`
	HandedOff int `json:"handedOff,omitempty"`
	// Blinks lists the attempts that ended because their worker's liveness
	// lapsed while its process lived on (JetStream unreachable for longer
	// than a lease): they are hand-offs (counted in Handoffs), not lost
	// workers.
	Blinks []int `json:"blinks,omitempty"`
	// Worker is the id of the worker holding the lease, "" when none does.
	Worker string `json:"worker,omitempty"`
	// WorkerEpoch is the epoch of the holder's liveness key (see
	// Liveness): the holder is alive while its key exists with this epoch.
	WorkerEpoch string `json:"workerEpoch,omitempty"`
	// LeaseUntil is a per-run lease end, written only by workers older than
	// per-worker liveness (rows without a WorkerEpoch); kept so such rows
	// are still taken over.
	LeaseUntil time.Time `json:"leaseUntil,omitzero"`

	// WaitingFor names the signal the handler waits for ("" when it does
	// not wait); the no-progress budget does not count such a wait.
	WaitingFor string `json:"waitingFor,omitempty"`
	// SignalsSeen records, per signal name, the signals-stream sequence of
	// the last signal a handler received, so a later wait (or a takeover)
	// gets the next one.
	SignalsSeen map[string]uint64 `json:"signalsSeen,omitempty"`

	CancelRequested bool   `json:"cancelRequested,omitempty"`
	CancelReason    string `json:"cancelReason,omitempty"`
	// Teardown says the cancel requested is a give-up's own (a budget, a
	// caller's window): its child is asked to stop, but the run is not
	// cancelled, so its descendants are not cancelled with it.
	Teardown bool `json:"teardown,omitempty"`

	// Delivered records, per status, when its finish was delivered.
	Delivered map[events.Status]time.Time `json:"delivered,omitempty"`
	// Finishes is the delivery ledger: per status, the finish owed and how
	// its delivery goes.
	Finishes map[events.Status]*FinishState `json:"finishes,omitempty"`
	// Notices is the ledger of milestone notices (detached.onMilestones):
	// per milestone name, the notice owed and how its delivery goes.
	Notices map[string]*NoticeState `json:"notices,omitempty"`
	// Redispatches counts dispatches the reconciler re-published because
	// the run's dispatch was lost.
	Redispatches int `json:"redispatches,omitempty"`
	// DispatchSeq is the dispatch stream sequence of the run's dispatch
	// message, while one is known; the reconciler checks it still exists
	// before re-dispatching.
	DispatchSeq uint64 `json:"dispatchSeq,omitempty"`

	CreatedAt    time.Time `json:"createdAt"`
	StartedAt    time.Time `json:"startedAt,omitzero"`
	LastSignalAt time.Time `json:"lastSignalAt,omitzero"`
	FinishedAt   time.Time `json:"finishedAt,omitzero"`
	// ReadyAt is when the run last became ready for a worker after its
	// dispatch: promoted from its concurrency key's queue, or resumed after
	// a give-up (a retry). Until an attempt starts, its budgets and the
	// wait for a worker count from it, not from CreatedAt.
	ReadyAt time.Time `json:"readyAt,omitzero"`

	// Unindexed says the run has no entries in the active-run index: a
	// top-level run that is not detached, dispatched with a plain publish,
	// needs nothing of the reconciler (its held dispatch wakes a takeover),
	// so it is spared the index's two writes.
	Unindexed bool `json:"unindexed,omitempty"`

	// ConcurrencyKey, Strategy and DebounceMs are the run's submit under a
	// concurrency key: runs of one key never execute at once (see
	// [events.Strategy]).
	ConcurrencyKey string          `json:"concurrencyKey,omitempty"`
	Strategy       events.Strategy `json:"strategy,omitempty"`
	DebounceMs     int64           `json:"debounceMs,omitempty"`
	// Session is the sub-agent session the run is a turn of.
	Session string `json:"session,omitempty"`
	// Tenant is the dispatch's tenant: the fair-share key of the provider
	// limits the run reserves on.
	Tenant string `json:"tenant,omitempty"`
	// NotBefore is when a queued debounce run's quiet window ends.
	NotBefore time.Time `json:"notBefore,omitzero"`
	// SubmitSeq is the dispatch stream sequence of a keyed run a service
	// published straight to the stream: latest and debounce order such runs
	// by it (by publish, not by which worker got to them first).
	SubmitSeq uint64 `json:"submitSeq,omitempty"`
	// SupersededBy names the newer run that replaced this queued one
	// (reason superseded); MergedInto the run that carries its input
	// (reason merged); Merged lists, on that run, the runs it carries.
	SupersededBy string   `json:"supersededBy,omitempty"`
	MergedInto   string   `json:"mergedInto,omitempty"`
	Merged       []string `json:"merged,omitempty"`

	// Usage is what the run reported spending, across attempts.
	Usage *jetruntype.Usage `json:"usage,omitempty"`
	// StepUsage is the part of Usage that came with the run's stored
	// steps (events.Step.Usage): the row counts their usage up to it. An
	// attempt that takes the run over adds what its stored steps spent
	// beyond it, so a step's usage counts once whatever dies when.
	StepUsage *jetruntype.Usage `json:"stepUsage,omitempty"`
	// Root is the top of the run's tree (empty at the top); BudgetFrom the
	// ancestors whose budgets it draws from; Budget its own tree budget.
	Root       string             `json:"root,omitempty"`
	BudgetFrom []string           `json:"budgetFrom,omitempty"`
	Budget     *events.TreeBudget `json:"budget,omitempty"`
	// TreeUsage, on the top of a tree and on a run that carries a budget,
	// is what the whole tree under it spent (itself included); TreeRuns
	// the nested runs counted against its runs budget.
	TreeUsage *jetruntype.UsageTotals `json:"treeUsage,omitempty"`
	TreeRuns  int64                   `json:"treeRuns,omitempty"`
	// ChargeMarks are the marks of the last charges TreeUsage took, one
	// per charging attempt (at most 64, the oldest dropped first): a charge
	// whose mark is here already, sent again after its answer was lost,
	// is not added twice.
	ChargeMarks []ChargeMark `json:"chargeMarks,omitempty"`
	// Overrun says which budget stopped the run's tree, and by how much.
	Overrun *jetruntype.Overrun `json:"overrun,omitempty"`
	// Holds are the open reservations against the run's budget
	// (reserve.go): they count as spent until settled, released or
	// expired.
	Holds []Hold `json:"holds,omitempty"`

	// FirstEventSeq is the JETRUN_EVENTS sequence of the run's first event,
	// where a replay starts; 0 until known.
	FirstEventSeq uint64 `json:"firstEventSeq,omitempty"`
	// ForkedFrom, on a re-run, is the run and step it re-ran, and the
	// steps it was given back stored (jetruntype.Fork).
	ForkedFrom *jetruntype.Fork `json:"forkedFrom,omitempty"`
}

// Final reports whether the run ended for good: completed, error or
// aborted.
func (r *Row) Final() bool { return r.Status.Final() }

// Live reports whether the run may still be executing: starting, running,
// or interrupted with its child still running.
func (r *Row) Live() bool {
	return r.Status == events.StatusStarting || r.Status == events.StatusRunning ||
		(r.Status == events.StatusInterrupted && r.ChildStillRunning)
}

// Failure returns the run's failure value, or nil if it completed or is
// still live.
func (r *Row) Failure() *jetruntype.Failure {
	if !r.Status.Terminal() || r.Status == events.StatusCompleted {
		return nil
	}
	return &jetruntype.Failure{
		RunID:             r.ID,
		Status:            r.Status,
		Message:           r.Error,
		Retryable:         r.Status == events.StatusInterrupted,
		Reason:            r.Reason,
		ChildStillRunning: r.ChildStillRunning,
	}
}
