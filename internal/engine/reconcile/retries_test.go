package reconcile_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Runs of an agent type nobody serves: each waits "starting" until the
// test's sweeps give it up for its budget (issue 35, item 9).

// sweepUntil sweeps until done holds for run id's row, and returns it.
func sweepUntil(t *testing.T, e *env, id, what string, done func(*model.Row) bool) *model.Row {
	t.Helper()
	var row *model.Row
	natstest.Eventually(t, 30*time.Second, func() bool {
		row = sweptRow(t, e, id)
		return done(row)
	}, "%s: last row %+v", what, row)
	return row
}

func interruptedAfter(at time.Time) func(*model.Row) bool {
	return func(r *model.Row) bool { return r.Status == events.StatusInterrupted && r.FinishedAt.After(at) }
}

// Two retries with no attempt between them: no attempt was handed off, so
// the attempts limit is not widened, and each retry's dispatch is
// published (not taken for a copy of the one before).
func TestRetriesWithNoAttemptBetweenAreEachDispatched(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true})
	client, err := parent.New(jetruntest.OpenRuntime(t, e.nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const id = "retried-unserved"
	req := parent.Request{AgentType: "nobody", RunID: id, Input: map[string]any{},
		Detached: &events.Detached{OnFinish: "record", MaxBudgetMs: 500}}
	if _, err := client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	row := sweepUntil(t, e, id, "first give-up", interruptedAfter(time.Time{}))
	var seqs []uint64
	for i := range 2 {
		if _, err := client.Dispatch(ctx, req); err != nil { // a retry
			t.Fatal(err)
		}
		resumed, _, err := e.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, resumed.DispatchSeq)
		row = sweepUntil(t, e, id, "give-up after a retry", interruptedAfter(row.FinishedAt))
		if row.Attempt != 0 || row.Handoffs != 0 {
			t.Fatalf("after retry %d: attempt %d, handoffs %d; no attempt ran, none was handed off", i+1, row.Attempt, row.Handoffs)
		}
	}
	stream, err := e.js.Stream(ctx, "JETRUN_DISPATCH")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("jetrun.dispatch.nobody"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["jetrun.dispatch.nobody"]; n != 3 || seqs[0] == seqs[1] {
		t.Fatalf("%d dispatches stored (retries at %v); want the first and one per retry", n, seqs)
	}
}

// A retried run's lost dispatches count from its retry: one its first
// life lost does not bring the retry's first loss to the limit.
func TestARetriedRunsLostDispatchesCountAgain(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true, reconcile: reconcile.Config{
		StartingGrace: 200 * time.Millisecond, LeaseGrace: 200 * time.Millisecond, MaxRedispatches: 1,
	}})
	client, err := parent.New(jetruntest.OpenRuntime(t, e.nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	stream, err := e.js.Stream(ctx, "JETRUN_DISPATCH")
	if err != nil {
		t.Fatal(err)
	}
	// lose deletes the run's newest dispatch, and returns its sequence.
	lose := func() uint64 {
		t.Helper()
		m, err := stream.GetLastMsgForSubject(ctx, "jetrun.dispatch.nobody")
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.DeleteMsg(ctx, m.Sequence); err != nil {
			t.Fatalf("lose dispatch %d: %v", m.Sequence, err)
		}
		return m.Sequence
	}
	const id = "lossy"
	req := parent.Request{AgentType: "nobody", RunID: id, Input: map[string]any{},
		Detached: &events.Detached{OnFinish: "record", MaxBudgetMs: 3000}}
	if _, err := client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	lose()
	sweepUntil(t, e, id, "first loss", func(r *model.Row) bool { return r.Redispatches == 1 })
	row := sweepUntil(t, e, id, "give-up", interruptedAfter(time.Time{}))
	if row.Reason != events.ReasonBudgetExceeded {
		t.Fatalf("given up: %s (%s: %s)", row.Status, row.Reason, row.Error)
	}

	if _, err := client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	lost := lose()
	row = sweepUntil(t, e, id, "the retry's loss", func(r *model.Row) bool {
		return r.Status != events.StatusStarting || r.DispatchSeq != lost
	})
	// Dispatched again, as a new message (not the first life's copy).
	if row.Status != events.StatusStarting || row.Redispatches != 1 || row.DispatchSeq < lost {
		t.Fatalf("after the retry's first lost dispatch: %s (%s: %s), redispatches %d, dispatch %d (the lost one %d)",
			row.Status, row.Reason, row.Error, row.Redispatches, row.DispatchSeq, lost)
	}
}
