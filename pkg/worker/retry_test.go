package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestRetryAfterRunsANewAttemptKeepingMilestones(t *testing.T) {
	t.Parallel()
	flaky := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		done := len(run.Milestones())
		if _, err := run.Milestone(ctx, fmt.Sprintf("try-%d", run.Attempt()), nil); err != nil {
			return worker.Result{}, err
		}
		if run.Attempt() < 3 {
			return worker.Result{}, jetruntype.RetryAfter(fmt.Errorf("upstream busy on attempt %d", run.Attempt()), 0)
		}
		return worker.Result{Summary: fmt.Sprintf("saw %d milestones", done)}, nil
	})
	b, _ := setup(t, worker.Config{MaxAttempts: 3}, map[string]worker.Handler{"flaky": flaky})
	publish(t, b.js, "jetrun.dispatch.flaky", `{"runId":"f1","input":{}}`)

	row := jetruntest.WaitRow(t, b.store, "f1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 3 || row.Summary != "saw 2 milestones" {
		t.Fatalf("row: status %s attempt %d summary %q error %q", row.Status, row.Attempt, row.Summary, row.Error)
	}
	if got := jetruntest.MilestoneSeqs(jetruntest.ReadEvents(t, b.js, "f1")); len(got) != 3 {
		t.Fatalf("milestones %v, want 3 across attempts", got)
	}
}

func TestRetryAfterEndsErrorWhenAttemptsRunOut(t *testing.T) {
	t.Parallel()
	always := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		return worker.Result{}, jetruntype.RetryAfter(errors.New("still down"), 0)
	})
	b, _ := setup(t, worker.Config{MaxAttempts: 2}, map[string]worker.Handler{"down": always})
	publish(t, b.js, "jetrun.dispatch.down", `{"runId":"d1","input":{}}`)

	row := jetruntest.WaitRow(t, b.store, "d1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || row.Reason != events.ReasonHandlerError || row.Error != "still down" || row.Attempt != 2 {
		t.Fatalf("row: status %s reason %s attempt %d error %q", row.Status, row.Reason, row.Attempt, row.Error)
	}
}

// RetryAfter's delay is the wait before the next attempt: a run that asks
// for an hour is not tried again while another, asking for a millisecond
// three times (the default growing delay would take 1+2+4 s), gets its four
// attempts and completes.
func TestRetryAfterWaitsTheDelayItNames(t *testing.T) {
	t.Parallel()
	var later atomic.Int64
	h := map[string]worker.Handler{
		"later": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			later.Add(1)
			return worker.Result{}, jetruntype.RetryAfter(errors.New("come back in an hour"), time.Hour)
		}),
		"soon": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if run.Attempt() < 4 {
				return worker.Result{}, jetruntype.RetryAfter(errors.New("come back at once"), time.Millisecond)
			}
			return worker.Result{Summary: "done"}, nil
		}),
	}
	b, _ := setup(t, worker.Config{MaxAttempts: 4}, h)
	publish(t, b.js, "jetrun.dispatch.later", `{"runId":"l1","input":{}}`)
	jetruntest.WaitRow(t, b.store, "l1", 30*time.Second, func(r *model.Row) bool {
		return r.Error == "come back in an hour" && r.Worker == ""
	})
	publish(t, b.js, "jetrun.dispatch.soon", `{"runId":"s1","input":{}}`)

	row := jetruntest.WaitRow(t, b.store, "s1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 4 {
		t.Fatalf("soon: status %s attempt %d error %q", row.Status, row.Attempt, row.Error)
	}
	row, _, err := b.store.Get(context.Background(), "l1")
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != events.StatusRunning || row.Attempt != 1 || row.Worker != "" || later.Load() != 1 {
		t.Fatalf("later: status %s attempt %d worker %q, handler called %d times; want one attempt, released",
			row.Status, row.Attempt, row.Worker, later.Load())
	}
}

// Cancel ends the run "error" at once, however many attempts are left,
// even inside a RetryAfter.
func TestCancelEndsTheRunWithoutARetry(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := map[string]worker.Handler{
		"cancel": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			calls.Add(1)
			return worker.Result{}, jetruntype.Cancel(errors.New("account closed"))
		}),
		"both": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			calls.Add(1)
			return worker.Result{}, jetruntype.RetryAfter(fmt.Errorf("wrapped: %w", jetruntype.Cancel(errors.New("account closed"))), 0)
		}),
	}
	b, _ := setup(t, worker.Config{MaxAttempts: 3}, h)
	publish(t, b.js, "jetrun.dispatch.cancel", `{"runId":"c1","input":{}}`)
	publish(t, b.js, "jetrun.dispatch.both", `{"runId":"c2","input":{}}`)
	for id, text := range map[string]string{"c1": "account closed", "c2": "wrapped: account closed"} {
		row := jetruntest.WaitRow(t, b.store, id, 60*time.Second, jetruntest.Final)
		if row.Status != events.StatusError || row.Reason != events.ReasonHandlerError || row.Error != text || row.Attempt != 1 {
			t.Errorf("%s: status %s reason %s attempt %d error %q", id, row.Status, row.Reason, row.Attempt, row.Error)
		}
	}
	if calls.Load() != 2 {
		t.Errorf("handlers called %d times; want once each", calls.Load())
	}
}
