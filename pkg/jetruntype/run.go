package jetruntype

import (
	"encoding/json"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// Run is a run as a user reads it: what it was asked to do, where it sits
// in its tree, how it went and goes, what it spent, and how its finishes
// and milestone notices reached their handler. jetrun builds it from the
// run's stored row each time it hands a row out (parent.Client.Inspect,
// kv.Runs, a worker's Run.Row, a finish handler, the HTTP API): it is a
// copy, and changing it changes nothing stored. The stored row carries
// more (the engine's bookkeeping); docs/protocol.md lists its format for
// readers of the runs bucket.
type Run struct {
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
	Progress *ProgressSnapshot `json:"progress,omitempty"`
	// Milestones is the number of milestones reached, LastMilestone the
	// newest one's name.
	Milestones    int    `json:"milestones,omitempty"`
	LastMilestone string `json:"lastMilestone,omitempty"`
	// Chunks is the number of chunks streamed.
	Chunks int64 `json:"chunks,omitempty"`

	// Attempt counts claims: 1 for the first worker, +1 at every takeover.
	Attempt int `json:"attempt,omitempty"`
	// Handoffs counts attempts handed back on graceful shutdown, released
	// after a fault, stopped by a lapse of their worker's liveness, or
	// given up and retried; they do not count against the attempt limit.
	Handoffs int `json:"handoffs,omitempty"`
	// Worker is the id of the worker executing the run, "" when none does.
	Worker string `json:"worker,omitempty"`
	// WaitingFor names the signal the handler waits for ("" when it does
	// not wait); the no-progress budget does not count such a wait.
	WaitingFor string `json:"waitingFor,omitempty"`

	CancelRequested bool   `json:"cancelRequested,omitempty"`
	CancelReason    string `json:"cancelReason,omitempty"`

	// Delivered records, per status, when its finish was delivered to the
	// run's finish handler (detached.onFinish).
	Delivered map[events.Status]time.Time `json:"delivered,omitempty"`
	// Finishes says, per status, how the delivery of the finish owed goes.
	Finishes map[events.Status]*FinishDelivery `json:"finishes,omitempty"`
	// Notices says, per milestone name, how the delivery of the milestone
	// notice owed (detached.onMilestones) goes.
	Notices map[string]*NoticeDelivery `json:"notices,omitempty"`
	// Redispatches counts dispatches the reconciler re-published because
	// the run's dispatch was lost.
	Redispatches int `json:"redispatches,omitempty"`

	CreatedAt    time.Time `json:"createdAt"`
	StartedAt    time.Time `json:"startedAt,omitzero"`
	LastSignalAt time.Time `json:"lastSignalAt,omitzero"`
	FinishedAt   time.Time `json:"finishedAt,omitzero"`
	// ReadyAt is when the run last became ready for a worker after its
	// dispatch: promoted from its concurrency key's queue, or resumed after
	// a give-up (a retry). Until an attempt starts, its budgets and the
	// wait for a worker count from it, not from CreatedAt.
	ReadyAt time.Time `json:"readyAt,omitzero"`

	// ConcurrencyKey, Strategy and DebounceMs are the run's submit under a
	// concurrency key: runs of one key never execute at once (see
	// [events.Strategy]).
	ConcurrencyKey string          `json:"concurrencyKey,omitempty"`
	Strategy       events.Strategy `json:"strategy,omitempty"`
	DebounceMs     int64           `json:"debounceMs,omitempty"`
	// NotBefore is when a queued debounce run's quiet window ends.
	NotBefore time.Time `json:"notBefore,omitzero"`
	// SupersededBy names the newer run that replaced this queued one
	// (reason superseded); MergedInto the run that carries its input
	// (reason merged); Merged lists, on that run, the runs it carries.
	SupersededBy string   `json:"supersededBy,omitempty"`
	MergedInto   string   `json:"mergedInto,omitempty"`
	Merged       []string `json:"merged,omitempty"`
	// Tenant is the dispatch's tenant: whose run it is in the fair share
	// of the provider limits it reserves on.
	Tenant string `json:"tenant,omitempty"`

	// Usage is what the run reported spending, across attempts.
	Usage *Usage `json:"usage,omitempty"`
	// Root is the top of the run's tree (empty at the top); BudgetFrom the
	// ancestors whose budgets it draws from; Budget its own tree budget.
	Root       string             `json:"root,omitempty"`
	BudgetFrom []string           `json:"budgetFrom,omitempty"`
	Budget     *events.TreeBudget `json:"budget,omitempty"`
	// Session is the sub-agent session the run is a turn of.
	Session string `json:"session,omitempty"`
	// TreeUsage, on the top of a tree and on a run that carries a budget,
	// is what the whole tree under it spent (itself included); TreeRuns
	// the nested runs counted against its runs budget.
	TreeUsage *UsageTotals `json:"treeUsage,omitempty"`
	TreeRuns  int64        `json:"treeRuns,omitempty"`
	// Overrun says which budget stopped the run's tree, and by how much.
	Overrun *Overrun `json:"overrun,omitempty"`
	// Holds are the open reservations against the run's budget.
	Holds []Hold `json:"holds,omitempty"`

	// FirstEventSeq is the JETRUN_EVENTS sequence of the run's first event,
	// where a replay of its events starts; 0 until known.
	FirstEventSeq uint64 `json:"firstEventSeq,omitempty"`
	// ForkedFrom, on a re-run, is the run and step it re-ran (Fork).
	ForkedFrom *Fork `json:"forkedFrom,omitempty"`
}

// ProgressSnapshot is the part of a progress event kept on the row.
type ProgressSnapshot struct {
	Fraction float64   `json:"fraction"`
	Phase    string    `json:"phase,omitempty"`
	Message  string    `json:"message,omitempty"`
	At       time.Time `json:"at"`
}

// Failure is how a parent sees a run that did not complete. Its JSON form
// carries "reason" and "childStillRunning" only for an interrupted run.
type Failure struct {
	RunID             string        `json:"runId"`
	OK                bool          `json:"ok"`
	Status            events.Status `json:"status"`
	Message           string        `json:"error,omitempty"` // the run's error text
	Retryable         bool          `json:"retryable"`
	Reason            string        `json:"reason,omitempty"`
	ChildStillRunning bool          `json:"childStillRunning"`
}

// MarshalJSON writes f with "reason" and "childStillRunning" only when f is
// an interrupted failure: they say why a run was given up and whether its
// child goes on, which means nothing for error or aborted (whose cause is
// in "error").
func (f Failure) MarshalJSON() ([]byte, error) {
	type plain struct {
		RunID             string        `json:"runId"`
		OK                bool          `json:"ok"`
		Status            events.Status `json:"status"`
		Message           string        `json:"error,omitempty"`
		Retryable         bool          `json:"retryable"`
		Reason            string        `json:"reason,omitempty"`
		ChildStillRunning *bool         `json:"childStillRunning,omitempty"`
	}
	p := plain{RunID: f.RunID, OK: f.OK, Status: f.Status, Message: f.Message, Retryable: f.Retryable}
	if f.Status == events.StatusInterrupted {
		still := f.ChildStillRunning
		p.Reason, p.ChildStillRunning = f.Reason, &still
	}
	return json.Marshal(p)
}

// Error implements error.
func (f *Failure) Error() string {
	msg := "run " + f.RunID + " ended " + string(f.Status)
	if f.Reason != "" {
		msg += " (" + f.Reason + ")"
	}
	if f.Message != "" {
		msg += ": " + f.Message
	}
	return msg
}

// Failure returns r's failure value, or nil if r completed or is still live.
func (r *Run) Failure() *Failure {
	if !r.Status.Terminal() || r.Status == events.StatusCompleted {
		return nil
	}
	return &Failure{
		RunID:             r.ID,
		Status:            r.Status,
		Message:           r.Error,
		Retryable:         r.Status == events.StatusInterrupted,
		Reason:            r.Reason,
		ChildStillRunning: r.ChildStillRunning,
	}
}

// Final reports whether r ended for good: completed, error or aborted.
func (r *Run) Final() bool { return r.Status.Final() }

// Live reports whether r may still be executing: starting, running, or
// interrupted with its child still running.
func (r *Run) Live() bool {
	return r.Status == events.StatusStarting || r.Status == events.StatusRunning ||
		(r.Status == events.StatusInterrupted && r.ChildStillRunning)
}
