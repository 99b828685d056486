package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/reconcile"
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
	client, err := parent.New(ctx, e.nc, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "ghost", RunID: "ghost3", Input: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ghost1", "ghost2", "ghost3"} {
		row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *jetruntype.Run) bool {
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
	w, err := worker.New(nc, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("ghost", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		return worker.Result{Summary: "finally"}, nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
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
	row := jetruntest.WaitRow(t, e.store, "ghost4", 30*time.Second, func(r *jetruntype.Run) bool {
		return r.Reason == events.ReasonWaitingForWorker
	})
	if row.Status != events.StatusStarting || !strings.Contains(row.Error, "no worker of agent type ghost is running") {
		t.Fatalf("row ghost4: %+v", row)
	}
}
