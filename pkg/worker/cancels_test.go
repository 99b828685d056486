package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A cancel event is acted on only for the attempt whose cancel the row
// records (issue 35, item 8). A run given up has its child's teardown
// re-notified by the reconciler until that attempt stops; a copy read
// before the run was retried can arrive after the retry's attempt started.
// Such a late copy, naming the old attempt or (from a writer in another
// language) no attempt, does not stop the new attempt.
func TestALateCancelOfAnEarlierAttemptDoesNotStopTheRetry(t *testing.T) {
	t.Parallel()
	started, stopped := make(chan int, 4), make(chan error, 4)
	gate := make(chan struct{})
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"retried": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			started <- run.Attempt()
			select {
			case <-gate:
				return worker.Result{Summary: "done"}, nil
			case <-ctx.Done():
				stopped <- context.Cause(ctx)
				return worker.Result{}, context.Cause(ctx)
			}
		}),
		"probe": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		}),
	})
	ctx := t.Context()
	client := newClient(t, b)

	// The row of a run given up in its first attempt, its child stopped
	// (its teardown was asked for with cancelRequested).
	const id = "late-cancel"
	now := time.Now()
	det := &events.Detached{OnFinish: "record"}
	givenUp := &model.Row{ID: id, AgentType: "retried", Input: json.RawMessage(`{}`), Detached: det,
		Status: events.StatusInterrupted, Reason: events.ReasonBudgetExceeded, Retryable: true, Attempt: 1,
		CancelRequested: true, CancelReason: events.ReasonBudgetExceeded,
		CreatedAt: now.Add(-time.Minute), StartedAt: now.Add(-time.Minute), FinishedAt: now}
	if _, err := b.store.Create(ctx, givenUp); err != nil {
		t.Fatal(err)
	}
	// The retry.
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "retried", RunID: id, Input: map[string]any{}, Detached: det}); err != nil {
		t.Fatal(err)
	}
	if a := receive(t, started, "the retry to start"); a != 2 {
		t.Fatalf("the retry runs attempt %d", a)
	}

	// Late copies of the first attempt's teardown notice.
	for _, ev := range []string{
		`{"runId":"` + id + `","reason":"budget-exceeded","attempt":1,"at":"2026-11-26T10:00:00Z"}`,
		`{"runId":"` + id + `","reason":"budget-exceeded","at":"2026-11-26T10:00:00Z"}`,
	} {
		publish(t, b.js, "jetrun.run."+id+".cancel", ev)
	}
	// A cancel of another run, published after them: once it is acted on,
	// so were they (one consumer takes every run's cancels, in order).
	publish(t, b.js, "jetrun.dispatch.probe", `{"runId":"probe","input":{}}`)
	jetruntest.WaitRow(t, b.store, "probe", 10*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusRunning && r.FirstEventSeq != 0 // its row synced: only the event stops it
	})
	if _, err := client.Cancel(ctx, "probe", "probing"); err != nil {
		t.Fatal(err)
	}
	if row := jetruntest.WaitRow(t, b.store, "probe", 10*time.Second, jetruntest.Final); row.Status != events.StatusAborted {
		t.Fatalf("probe: %s", row.Status)
	}

	select {
	case cause := <-stopped:
		t.Fatalf("the retry's attempt was stopped (%v) by a late cancel of attempt 1", cause)
	default:
	}
	close(gate)
	row := jetruntest.WaitRow(t, b.store, id, 10*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("the retry: %s (%s: %s) at attempt %d", row.Status, row.Reason, row.Error, row.Attempt)
	}
}

// receive returns the next value on ch, failing the test after 30 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
