package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A dispatch for an agent type no worker serves is visible: its row exists,
// "starting" with reason waiting-for-worker, whether a service published
// it straight to the stream (with or without a run id) or a parent that
// allows unknown agent types dispatched it. A worker that comes later runs
// them, and the reason goes.
func TestDispatchNoWorkerServesIsVisible(t *testing.T) {
	t.Parallel()
	e := setup(t, options{reconcile: reconcile.Config{StartingGrace: time.Second}})
	ctx := context.Background()
	if _, err := e.js.Publish(ctx, "jetrun.dispatch.ghost", []byte(`{"runId":"ghost1","input":{}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(ctx, "jetrun.dispatch.ghost", []byte(`{"input":{}}`), jetstream.WithMsgID("ghost2")); err != nil {
		t.Fatal(err)
	}
	client, err := parent.New(jetruntest.OpenRuntime(t, e.nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "ghost", RunID: "ghost3", Input: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ghost1", "ghost2", "ghost3"} {
		row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool {
			return r.Reason == events.ReasonWaitingForWorker
		})
		if row.Status != events.StatusStarting || row.AgentType != "ghost" ||
			!strings.Contains(row.Error, "no worker serves agent type ghost") {
			t.Fatalf("row %s: %+v", id, row)
		}
	}

	nc, err := nats.Connect(e.ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	w := jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("ghost", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "finally"}, nil
		})
	})
	for _, id := range []string{"ghost1", "ghost2", "ghost3"} {
		row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Final)
		if row.Status != events.StatusCompleted || row.Reason != "" || row.Attempt != 1 {
			t.Fatalf("row %s after a worker came: %+v", id, row)
		}
	}

	// The only worker of the type goes away: its consumer stays, nobody
	// pulls from it.
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if _, err := e.js.Publish(ctx, "jetrun.dispatch.ghost", []byte(`{"runId":"ghost4","input":{}}`)); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "ghost4", 30*time.Second, func(r *model.Row) bool {
		return r.Reason == events.ReasonWaitingForWorker
	})
	if row.Status != events.StatusStarting || !strings.Contains(row.Error, "no worker of agent type ghost is running") {
		t.Fatalf("row ghost4: %+v", row)
	}
}

// With DispatchUnservedWait set, a dispatch no worker takes is given up
// after that wait: its run ends "error" (reason no-worker, saying why), the
// dispatch is moved to jetrun.dlq.<agentType> with the reason, and it is
// gone from the dispatch stream. Nothing is dropped without a word.
func TestUnservedDispatchIsDeadLetteredAfterTheWait(t *testing.T) {
	t.Parallel()
	e := setup(t, options{reconcile: reconcile.Config{StartingGrace: time.Second, DispatchUnservedWait: 2 * time.Second}})
	ctx := context.Background()
	if _, err := e.js.Publish(ctx, "jetrun.dispatch.nobody", []byte(`{"runId":"nobody1","input":{"q":1}}`)); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "nobody1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || row.Reason != events.ReasonNoWorker ||
		!strings.Contains(row.Error, "no worker serves agent type nobody") {
		t.Fatalf("row: %+v", row)
	}
	// The row ends first; the dead letter, then the dispatch's removal,
	// follow it: wait for the last of them.
	dispatch, err := e.js.Stream(ctx, "JETRUN_DISPATCH")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		_, err := dispatch.GetLastMsgForSubject(ctx, "jetrun.dispatch.nobody")
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}, "the dispatch is still queued")
	dlq, err := e.js.Stream(ctx, "JETRUN_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlq.GetLastMsgForSubject(ctx, "jetrun.dlq.nobody")
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if string(m.Data) != `{"runId":"nobody1","input":{"q":1}}` || !strings.Contains(m.Header.Get(events.HeaderReason), "no worker serves") {
		t.Fatalf("dead letter %s, headers %v", m.Data, m.Header)
	}
}

// A run retried after its first dispatch waited out DispatchUnservedWait
// (the run was given up meanwhile, so nothing ended it then) gets the
// wait again from its retry: the old dispatch's age does not end it
// no-worker at once. Here its budget, shorter than the wait, gives the
// retried run up first.
func TestARetriedRunGetsTheUnservedWaitAgain(t *testing.T) {
	t.Parallel()
	const wait, budget = 4 * time.Second, 3 * time.Second
	e := setup(t, options{reconcile: reconcile.Config{StartingGrace: time.Second, DispatchUnservedWait: wait}})
	client, err := parent.New(jetruntest.OpenRuntime(t, e.nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	req := parent.Request{AgentType: "nobody", RunID: "unserved-retry", Input: map[string]any{},
		Detached: &events.Detached{OnFinish: "record", MaxBudgetMs: budget.Milliseconds()}}
	first, err := client.Dispatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Given up by its budget, then kept as it is while its dispatch waits
	// out the unserved wait.
	natstest.Eventually(t, 30*time.Second, func() bool {
		row, _, err := e.store.Get(ctx, req.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status.Final() {
			t.Fatalf("the given-up run ended: %+v", row)
		}
		return row.Status == events.StatusInterrupted && time.Since(first.Run.CreatedAt) > wait
	}, "the run was not given up by its budget")
	if _, err := client.Dispatch(ctx, req); err != nil { // the retry
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, req.RunID, 30*time.Second, func(r *model.Row) bool {
		return r.Status != events.StatusStarting && !r.ReadyAt.IsZero() // retried (no attempt ran: no hand-off)
	})
	if row.Status != events.StatusInterrupted || row.Reason != events.ReasonBudgetExceeded {
		t.Fatalf("the retried run: %s (%s: %s); want given up by its budget again, not ended for its first dispatch's wait",
			row.Status, row.Reason, row.Error)
	}
}
