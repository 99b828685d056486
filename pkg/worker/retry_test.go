package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestRetryableErrorRunsANewAttemptKeepingMilestones(t *testing.T) {
	t.Parallel()
	flaky := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		done := len(run.Milestones())
		if _, err := run.Milestone(ctx, fmt.Sprintf("try-%d", run.Attempt()), nil); err != nil {
			return worker.Result{}, err
		}
		if run.Attempt() < 3 {
			return worker.Result{}, worker.Retryable(fmt.Errorf("upstream busy on attempt %d", run.Attempt()))
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

func TestRetryableErrorEndsErrorWhenAttemptsRunOut(t *testing.T) {
	t.Parallel()
	always := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		return worker.Result{}, worker.Retryable(errors.New("still down"))
	})
	b, _ := setup(t, worker.Config{MaxAttempts: 2}, map[string]worker.Handler{"down": always})
	publish(t, b.js, "jetrun.dispatch.down", `{"runId":"d1","input":{}}`)

	row := jetruntest.WaitRow(t, b.store, "d1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || row.Reason != events.ReasonHandlerError || row.Error != "still down" || row.Attempt != 2 {
		t.Fatalf("row: status %s reason %s attempt %d error %q", row.Status, row.Reason, row.Attempt, row.Error)
	}
	if !errors.Is(worker.Retryable(errors.New("x")), worker.ErrRetry) || worker.Retryable(nil) != nil {
		t.Fatal("Retryable does not mark errors with ErrRetry")
	}
}
