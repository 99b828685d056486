package events

// Status is a run's lifecycle state.
type Status string

// The run statuses. StatusCompleted, StatusError and StatusAborted are final:
// no transition ever leaves them. StatusInterrupted is soft: a child that
// finishes later replaces it with its real result.
const (
	StatusStarting    Status = "starting"
	StatusRunning     Status = "running"
	StatusCompleted   Status = "completed"
	StatusError       Status = "error"
	StatusAborted     Status = "aborted"
	StatusInterrupted Status = "interrupted"
	// StatusQueued is a keyed run waiting for its concurrency key (see
	// Strategy): no dispatch is out for it and no worker executes it. It is
	// neither live nor final.
	StatusQueued Status = "queued"
)

// Reasons recorded with a status. ReasonLeaseLost is reserved by the
// contract; jetrun takes runs over instead of giving them up for it.
const (
	ReasonBudgetExceeded = "budget-exceeded"
	ReasonNoProgress     = "no-progress"
	ReasonWindowExceeded = "window-exceeded"
	ReasonLeaseLost      = "lease-lost"
	ReasonCancelled      = "cancelled"
	ReasonHandlerError   = "handler-error"
	ReasonPanic          = "panic"
	ReasonMaxAttempts    = "max-attempts"
	ReasonDispatchFailed = "dispatch-failed"
	ReasonBadInput       = "bad-input"
	ReasonDispatchLost   = "dispatch-lost"
	ReasonCleared        = "cleared"
	// ReasonWaitingForWorker marks a "starting" run whose dispatch no
	// worker takes: no worker serves its agent type, or none is pulling.
	// It is not final; a worker that comes clears it with its claim.
	ReasonWaitingForWorker = "waiting-for-worker"
	// ReasonNoWorker ends a run whose dispatch no worker took for the
	// reconciler's DispatchUnservedWait (off by default); the dispatch is
	// dead-lettered to jetrun.dlq.<agentType>.
	ReasonNoWorker = "no-worker"
)

// DefaultMaxDepth bounds how deeply runs may nest (a dispatch's depth).
const DefaultMaxDepth = 8

// Final reports whether s can never change again.
func (s Status) Final() bool {
	return s == StatusCompleted || s == StatusError || s == StatusAborted
}

// Terminal reports whether s ends a run as far as a waiting parent is
// concerned: a final status or the soft StatusInterrupted.
func (s Status) Terminal() bool { return s.Final() || s == StatusInterrupted }

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusStarting, StatusRunning, StatusCompleted, StatusError, StatusAborted, StatusInterrupted, StatusQueued:
		return true
	}
	return false
}
