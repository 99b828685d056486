package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Runs waiting for an approval have their dispatches shelved (refused once
// with a long delay, no InProgress while they wait; docs/leases.md). A
// child-worker killed with -9 then leaves them pending on the server, and
// they are still taken over: by a worker started after the death (it lists
// the shelf entries of workers whose key is gone), and by a worker that
// lived beside the one killed (it sees the key lapse). Each run then
// completes once, resuming after its milestones, at attempt 3.
func TestKilledWorkersShelvedWaitingRunsAreTakenOver(t *testing.T) {
	t.Parallel()
	const n = 20
	e := newEnv(t)
	cfg := map[string]string{"JETRUN_LEASE": "2s", "JETRUN_CONCURRENCY": "40"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	active, err := e.js.KeyValue(ctx, wire.Namespace("").ActiveBucket())
	if err != nil {
		t.Fatal(err)
	}
	shelved := func(worker string) {
		t.Helper()
		for i := range n {
			key := fmt.Sprintf("shelf.%s.shelf-%d", worker, i)
			natstest.Eventually(t, time.Minute, func() bool {
				_, err := active.Get(ctx, key)
				return err == nil
			}, "no shelf entry %s", key)
		}
	}
	takenOver := func(worker string, attempt int) {
		t.Helper()
		for i := range n {
			jetruntest.WaitRow(t, e.store, fmt.Sprintf("shelf-%d", i), time.Minute, func(r *model.Row) bool {
				return r.Attempt == attempt && r.Worker == worker && r.WaitingFor == demo.ApprovalSignal
			})
		}
	}

	a := e.childWorker(t, "shelf-a", cfg)
	for i := range n {
		_, err := e.client.Dispatch(ctx, parent.Request{
			AgentType: demo.AgentType, RunID: fmt.Sprintf("shelf-%d", i),
			Input: map[string]int{"steps": 3, "stepMs": 10, "approveAt": 2},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	takenOver("shelf-a", 1)
	shelved("shelf-a")
	a.kill()
	// No worker lives until shelf-a's key is gone.
	natstest.Eventually(t, time.Minute, func() bool {
		_, err := active.Get(ctx, "worker.shelf-a")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, "shelf-a's liveness key did not expire")
	b := e.childWorker(t, "shelf-b", cfg)
	takenOver("shelf-b", 2)
	shelved("shelf-b")

	e.childWorker(t, "shelf-c", cfg)
	b.kill()
	takenOver("shelf-c", 3)

	for i := range n {
		if _, err := e.client.Signal(ctx, fmt.Sprintf("shelf-%d", i), demo.ApprovalSignal, map[string]bool{"approved": true}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("shelf-%d", i)
		row := jetruntest.WaitRow(t, e.store, id, time.Minute, jetruntest.Final)
		if row.Status != events.StatusCompleted || row.Attempt != 3 || row.Handoffs != 0 {
			t.Errorf("%s: %s attempt %d handoffs %d %s; want completed at attempt 3", id, row.Status, row.Attempt, row.Handoffs, row.Error)
		}
		evs := waitFinalEvent(t, e.js, id)
		if got := jetruntest.Statuses(evs); !slices.Equal(got, []events.Status{
			events.StatusRunning, events.StatusRunning, events.StatusRunning, events.StatusCompleted}) {
			t.Errorf("%s: statuses %v", id, got)
		}
		var names []string
		for _, m := range jetruntest.Milestones(evs) {
			names = append(names, m.Name)
		}
		if want := []string{"step-1", "approved", "step-2", "step-3"}; !slices.Equal(names, want) {
			t.Errorf("%s: milestones %v, want %v", id, names, want)
		}
	}
}
