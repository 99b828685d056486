package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// idleFetchExpiry is about how long the worker's idle pull request waits on
// the server (internal/pull). Issue 23: a parked run at concurrency 1 got
// its slot back only when that request expired, so each deadline below,
// shorter than it, failed.
const idleFetchExpiry = 4500 * time.Millisecond

// At concurrency 1, a run waiting on a signal resumes as soon as the signal
// comes: the slot it lent out while parked is not held by the worker's idle
// fetch until that request expires.
func TestSignalledRunResumesAtOnceAtConcurrencyOne(t *testing.T) {
	t.Parallel()
	resumed := make(chan time.Time, 1)
	b, _ := setup(t, worker.Config{Concurrency: 1}, map[string]worker.Handler{
		"waits": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if _, err := run.Wait(ctx, "go"); err != nil {
				return worker.Result{}, err
			}
			resumed <- time.Now()
			return worker.Result{Summary: "resumed"}, nil
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "waits", RunID: "w", Input: 1}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, b.store, "w", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "go" })
	sent := time.Now()
	if _, err := c.Signal(ctx, "w", "go", 1); err != nil {
		t.Fatal(err)
	}
	deadline := idleFetchExpiry * 2 / 3
	select {
	case at := <-resumed:
		t.Logf("resumed %s after the signal", at.Sub(sent))
	case <-time.After(deadline):
		t.Fatalf("the run did not resume within %s of its signal", deadline)
	}
	row := jetruntest.WaitRow(t, b.store, "w", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("status %s", row.Status)
	}
}

// At concurrency 1, three levels of a run delegating to its own agent type
// (each parent parked on its child) complete within one idle fetch's
// expiry; each parent resumed only when it expired before.
func TestSelfDelegationDoesNotWaitForIdleFetches(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{Concurrency: 1}, map[string]worker.Handler{"delegate": delegate()})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Warm up: the first run's dispatch creates the worker's state.
	if _, err := c.Run(ctx, parent.Request{AgentType: "delegate", RunID: "warm", Input: map[string]int{"depth": 0}}); err != nil {
		t.Fatal(err)
	}
	deadline := idleFetchExpiry * 8 / 9
	rctx, rcancel := context.WithTimeout(ctx, deadline)
	defer rcancel()
	began := time.Now()
	res, err := c.Run(rctx, parent.Request{AgentType: "delegate", RunID: "top", Input: map[string]int{"depth": 2}})
	if err != nil {
		t.Fatalf("three levels of self-delegation did not complete within %s: %v", deadline, err)
	}
	if res.Summary != "2>1>leaf" {
		t.Fatalf("summary %q", res.Summary)
	}
	t.Logf("three levels in %s", time.Since(began))
}
