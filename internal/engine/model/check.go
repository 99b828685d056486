package model

import (
	"errors"
	"fmt"
	"slices"

	"github.com/jetrun/jetrun/pkg/events"
)

// Check returns what is wrong with r's state (nil when nothing is): the
// invariants every transition (Apply) keeps, which the table and fuzz
// tests check after every step.
//
//   - A run waiting to start (queued, starting) has no holder, no attempt
//     under way (startedAt), no wait, and is neither retryable nor
//     finished; a queued one has a concurrency key.
//   - A running run has had an attempt (attempt ≥ 1, startedAt set); it
//     is neither retryable nor finished, and no child of a give-up runs.
//     It keeps its status between attempts: a hand-back, a lapse, a dead
//     holder release the holder, not the status.
//   - A given-up run (interrupted) is retryable and finished (finishedAt);
//     its child still runs exactly while a holder is left on it.
//   - A final run has no holder, no child running, no wait, and is not
//     retryable; it is finished (finishedAt).
//   - A holder's epoch comes with its worker; a teardown is a cancel
//     requested.
//   - Attempts are counted once: hand-offs never exceed attempts; blinks
//     and the last attempt handed off name attempts that ran, each once.
//   - Its budgets count from its attempt's start or from when it became
//     ready, never from before it was created or became ready
//     (BudgetSince ≥ readyAt ≥ createdAt).
func Check(r *Row) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	held := r.Worker != "" || r.WorkerEpoch != "" || !r.LeaseUntil.IsZero()
	s := r.Status
	switch {
	case s == events.StatusQueued || s == events.StatusStarting:
		if held {
			bad("%s with a holder (%q)", s, r.Worker)
		}
		if !r.StartedAt.IsZero() {
			bad("%s with startedAt %v", s, r.StartedAt)
		}
		if r.WaitingFor != "" {
			bad("%s waiting for %q", s, r.WaitingFor)
		}
		if s == events.StatusQueued && r.ConcurrencyKey == "" {
			bad("queued without a concurrency key")
		}
	case s == events.StatusRunning:
		if r.Attempt < 1 {
			bad("running at attempt %d", r.Attempt)
		}
		if r.StartedAt.IsZero() {
			bad("running without startedAt")
		}
	case s == events.StatusInterrupted:
		if held != r.ChildStillRunning {
			bad("interrupted with childStillRunning %v and holder %q", r.ChildStillRunning, r.Worker)
		}
	case s.Final():
		if held {
			bad("%s with a holder (%q)", s, r.Worker)
		}
		if r.WaitingFor != "" {
			bad("%s waiting for %q", s, r.WaitingFor)
		}
	default:
		bad("unknown status %q", s)
	}
	if terminal := s.Terminal(); r.FinishedAt.IsZero() == terminal {
		bad("%s with finishedAt %v", s, r.FinishedAt)
	}
	if r.Retryable != (s == events.StatusInterrupted) {
		bad("%s with retryable %v", s, r.Retryable)
	}
	if r.ChildStillRunning && s != events.StatusInterrupted {
		bad("%s with childStillRunning", s)
	}
	if r.WorkerEpoch != "" && r.Worker == "" {
		bad("a holder's epoch %q without its worker", r.WorkerEpoch)
	}
	if r.Teardown && !r.CancelRequested {
		bad("a teardown without a cancel requested")
	}
	checkAttempts(r, bad)
	if !r.ReadyAt.IsZero() && r.ReadyAt.Before(r.CreatedAt) {
		bad("readyAt %v before createdAt %v", r.ReadyAt, r.CreatedAt)
	}
	if since := r.BudgetSince(); since.Before(r.CreatedAt) || since.Before(r.ReadyAt) {
		bad("budgets count from %v, before createdAt %v or readyAt %v", since, r.CreatedAt, r.ReadyAt)
	}
	return errors.Join(errs...)
}

// checkAttempts checks that r counts each attempt once.
func checkAttempts(r *Row, bad func(string, ...any)) {
	if r.Attempt < 0 || r.Handoffs < 0 || r.Attempt-r.Handoffs < 0 {
		bad("attempt %d, handoffs %d", r.Attempt, r.Handoffs)
	}
	if r.HandedOff < 0 || r.HandedOff > r.Attempt {
		bad("handedOff %d beyond attempt %d", r.HandedOff, r.Attempt)
	}
	for i, b := range r.Blinks {
		if b < 1 || b > r.Attempt || slices.Contains(r.Blinks[:i], b) {
			bad("blinks %v at attempt %d", r.Blinks, r.Attempt)
			break
		}
	}
}
