package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// The runs below wait for a signal (an approval) for longer than their
// no-progress budget: the test sets their last sign of life an hour back
// while they wait, as if they had waited that long. A wait is not silence,
// and neither is the time until a new attempt starts: when the wait ends
// (it times out, its run is handed back in a rolling restart, or its
// worker is lost and the run taken over) the no-progress clock starts
// again, so the next sweep does not give the run up at once.

// quietBudgets is a detached run's budgets in these tests: a minute of
// silence, no absolute budget.
var quietBudgets = events.Detached{NoProgressBudgetMs: time.Minute.Milliseconds(), MaxBudgetMs: events.BudgetNever}

// ageLastSignal sets run id's last sign of life an hour back.
func ageLastSignal(t *testing.T, e *env, id string) {
	t.Helper()
	if _, _, err := e.store.Mutate(t.Context(), id, func(r *model.Row) error {
		r.LastSignalAt = time.Now().Add(-time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// sweptRow runs one sweep and returns run id's row after it.
func sweptRow(t *testing.T, e *env, id string) *model.Row {
	t.Helper()
	if _, err := e.recon.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	row, _, err := e.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// waitClosed waits for ch to be closed, failing the test after 30 s.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// approval waits for the signal "approve" and completes with it.
func approval(ctx context.Context, run *worker.Run) (worker.Result, error) {
	payload, err := run.Wait(ctx, "approve")
	if err != nil {
		return worker.Result{}, err
	}
	return worker.Result{Summary: "approved", Output: json.RawMessage(payload)}, nil
}

func TestARunHandedBackAfterALongWaitIsNotGivenUpAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true})
	ctx := t.Context()
	const id = "handed-back"
	start := func(name string) *worker.Worker {
		rt := jetruntest.OpenRuntime(t, e.nc, jetrun.Config{})
		return jetruntest.StartWorker(t, rt, worker.Config{ID: name, RowSyncInterval: 100 * time.Millisecond}, func(w *worker.Worker) {
			w.HandleFunc("approval", approval)
		})
	}
	a := start("restarted")
	e.detached(t, id, "approval", map[string]any{}, quietBudgets)
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" })
	ageLastSignal(t, e, id)
	if row := sweptRow(t, e, id); row.Status != events.StatusRunning {
		t.Fatalf("while it waits: %s (%s)", row.Status, row.Reason)
	}

	// A rolling restart: the worker hands the run back (at once: its
	// shutdown does not wait for the run to finish).
	sctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	handedBack := jetruntest.WaitRow(t, e.store, id, 10*time.Second, func(r *model.Row) bool { return r.Worker == "" })
	if row := sweptRow(t, e, id); row.Status != events.StatusRunning {
		t.Fatalf("handed back (waitingFor %q, lastSignalAt %v ago), then swept: %s (%s); want it left for the next worker",
			handedBack.WaitingFor, time.Since(handedBack.LastSignalAt).Round(time.Second), row.Status, row.Reason)
	}

	start("next")
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool {
		return r.Attempt == 2 && r.WaitingFor == "approve"
	})
	if _, err := e.client.Signal(ctx, id, "approve", map[string]bool{"approved": true}); err != nil {
		t.Fatal(err)
	}
	if row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Final); row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("after the approval: %s (%s) at attempt %d", row.Status, row.Reason, row.Attempt)
	}
}

func TestARunTakenOverAfterALongWaitIsNotGivenUpAtOnce(t *testing.T) {
	t.Parallel()
	started, gate := make(chan struct{}), make(chan struct{})
	e := setup(t, options{noReconcile: true, handlers: map[string]worker.Handler{
		// The new attempt has nothing to say for a while.
		"silent": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			close(started)
			select {
			case <-gate:
				return worker.Result{Summary: "done"}, nil
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		}),
	}})
	ctx := t.Context()
	const id = "taken-over"
	// The row as a worker that died an hour into a wait left it.
	det := quietBudgets
	det.OnFinish = "record"
	hourAgo := time.Now().Add(-time.Hour)
	dead := &model.Row{ID: id, AgentType: "silent", Input: json.RawMessage(`{}`), Detached: &det,
		Status: events.StatusRunning, Attempt: 1, Worker: "dead-worker", WorkerEpoch: "gone", WaitingFor: "approve",
		CreatedAt: hourAgo, StartedAt: hourAgo, LastSignalAt: hourAgo}
	if _, err := e.store.Create(ctx, dead); err != nil {
		t.Fatal(err)
	}
	if row := sweptRow(t, e, id); row.Status != events.StatusRunning {
		t.Fatalf("while it waits: %s (%s)", row.Status, row.Reason)
	}
	// Its dispatch, as the sweep that found its holder gone published it.
	if _, err := e.js.Publish(ctx, "jetrun.dispatch.silent", []byte(`{"runId":"`+id+`","input":{}}`), jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, started, "the takeover's handler to start")
	row := sweptRow(t, e, id)
	if row.Status != events.StatusRunning || row.Attempt != 2 {
		t.Fatalf("taken over, then swept: %s (%s) at attempt %d; want the new attempt running", row.Status, row.Reason, row.Attempt)
	}
	close(gate)
	if row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
		t.Fatalf("%s (%s)", row.Status, row.Reason)
	}
}

func TestARunWhoseLongWaitEndsIsNotGivenUpAtOnce(t *testing.T) {
	t.Parallel()
	endWait, waited, gate := make(chan struct{}), make(chan struct{}), make(chan struct{})
	e := setup(t, options{noReconcile: true, handlers: map[string]worker.Handler{
		// It waits until the test ends the wait (a timeout), then has
		// nothing to say for a while.
		"impatient": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			wctx, cancel := context.WithCancel(ctx)
			go func() {
				defer cancel()
				select {
				case <-endWait:
				case <-wctx.Done():
				}
			}()
			_, err := run.Wait(wctx, "approve")
			cancel()
			if err == nil {
				return worker.Result{}, errors.New("got a signal nobody sent")
			}
			close(waited)
			select {
			case <-gate:
				return worker.Result{Summary: "went on without it"}, nil
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		}),
	}})
	const id = "wait-ended"
	e.detached(t, id, "impatient", map[string]any{}, quietBudgets)
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" })
	ageLastSignal(t, e, id)
	close(endWait)
	waitClosed(t, waited, "the wait to end")
	ended := jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "" })
	if row := sweptRow(t, e, id); row.Status != events.StatusRunning {
		t.Fatalf("the wait ended (lastSignalAt %v ago), then swept: %s (%s); want it running",
			time.Since(ended.LastSignalAt).Round(time.Second), row.Status, row.Reason)
	}
	close(gate)
	if row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
		t.Fatalf("%s (%s)", row.Status, row.Reason)
	}
}
