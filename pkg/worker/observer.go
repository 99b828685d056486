package worker

import (
	"cmp"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// Observer is told what a Worker does, for metrics (internal/metrics
// implements it with Prometheus). Its methods are called on the worker's
// hot paths: they must be quick and must not block. A nil Config.Observer
// observes nothing.
type Observer interface {
	// RunStarted: an attempt of a run began (its "running" event is
	// stored) and its handler is about to be called.
	RunStarted(RunStart)
	// RunEnded: that attempt is over, whatever its outcome.
	RunEnded(RunEnd)
	// DispatchDeadLettered: a dispatch was filed in the dead-letter stream.
	DispatchDeadLettered(agentType string, reason DeadLetterReason)
}

// RunStart describes the start of one attempt.
type RunStart struct {
	RunID     string
	AgentType string
	Attempt   int
	// Takeover is true when an earlier attempt existed (a lost or
	// handed-back worker's run taken up again).
	Takeover bool
	// Queued is how long the dispatch waited in the stream before this
	// attempt started (zero when unknown).
	Queued time.Duration
}

// The outcomes of an attempt that did not write a final status.
const (
	// OutcomeHandedBack: the worker shut down and handed the run back.
	OutcomeHandedBack = "handed-back"
	// OutcomeLeaseLost: the attempt no longer held the run and stopped.
	OutcomeLeaseLost = "lease-lost"
	// OutcomeReleased: the attempt could not start and released the run.
	OutcomeReleased = "released"
	// OutcomeRetry: the handler asked for a retry (jetruntype.RetryAfter).
	OutcomeRetry = "retry"
	// OutcomeEndedElsewhere: the run was ended (or cleared) by someone
	// else while the attempt ran.
	OutcomeEndedElsewhere = "ended-elsewhere"
	// OutcomeUnrecorded: the outcome could not be written; the lease runs
	// out and another worker takes the run over.
	OutcomeUnrecorded = "unrecorded"
)

// RunEnd describes the end of one attempt.
type RunEnd struct {
	RunID     string
	AgentType string
	Attempt   int
	// Outcome is the final status written (completed, error, aborted,
	// interrupted) or one of the Outcome constants.
	Outcome string
	// Reason is the status reason, e.g. events.ReasonCancelled.
	Reason string
	// Took is how long the attempt ran.
	Took time.Duration
	// Usage is what the attempt reported (Run.Usage): this attempt's
	// reports only, so counting it per attempt counts each report once.
	Usage events.Usage
}

// DeadLetterReason classifies why a dispatch was dead-lettered (a bounded
// set, fit for a metric label; the full text is in the DLQ message).
type DeadLetterReason string

// The reasons a dispatch is dead-lettered.
const (
	DeadLetterMalformed  DeadLetterReason = "malformed"   // not a valid dispatch
	DeadLetterBadSubject DeadLetterReason = "bad-subject" // the subject names no agent type
	DeadLetterBadID      DeadLetterReason = "bad-id"      // no usable run id
	DeadLetterTooDeep    DeadLetterReason = "too-deep"    // nested deeper than MaxDepth
	DeadLetterCorruptRow DeadLetterReason = "corrupt-row" // the run's row is not valid JSON
	DeadLetterWrongType  DeadLetterReason = "wrong-type"  // the run exists as another agent type
	DeadLetterKeyBusy    DeadLetterReason = "key-busy"    // strategy drop: its concurrency key is taken
	DeadLetterSchema     DeadLetterReason = "schema"      // the input does not match the agent type's input schema
)

// observeStart tells the Observer that e's attempt of row began.
func (w *Worker) observeStart(e *execution, row *model.Row) {
	if w.cfg.Observer == nil {
		return
	}
	s := RunStart{RunID: row.ID, AgentType: row.AgentType, Attempt: row.Attempt, Takeover: row.Attempt > 1}
	if !s.Takeover {
		if md, err := e.firstMsg().Metadata(); err == nil && !md.Timestamp.IsZero() {
			s.Queued = max(time.Since(md.Timestamp), 0)
		}
	}
	w.cfg.Observer.RunStarted(s)
}

// observeEnd tells the Observer that e's attempt is over, if it began.
func (w *Worker) observeEnd(e *execution) {
	if w.cfg.Observer == nil {
		return
	}
	begun, begunAt, outcome, reason := e.ctl.observed()
	if !begun {
		return
	}
	agentType := e.rw.row().AgentType
	w.cfg.Observer.RunEnded(RunEnd{RunID: e.id, AgentType: agentType, Attempt: e.attempt,
		Outcome: cmp.Or(outcome, OutcomeUnrecorded), Reason: reason, Took: time.Since(begunAt), Usage: e.attemptUsage()})
}
