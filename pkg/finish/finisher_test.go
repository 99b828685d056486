package finish_test

import (
	"context"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// The worker only records the owed finish and says so on the status event
// (Jetrun-Finish-Owed); it publishes nothing to jetrun.finish.>. The
// finisher of a running Deliverer publishes it, once, and the handler runs
// once.
func TestTheFinisherNotTheWorkerPublishesFinishes(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx := context.Background()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) { w.Handle(demo.AgentType, demo.Handler()) })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}

	// No deliverer: the run completes, its finish is owed and unpublished.
	detached(t, client, "no-finisher", "h")
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "no-finisher", 10*time.Second, jetruntest.Final)
	if !row.FinishOwed(events.StatusCompleted) {
		t.Fatalf("no finish owed: %+v", row.Finishes)
	}
	last, err := js.Stream(ctx, "JETRUN_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := last.GetLastMsgForSubject(ctx, "jetrun.run.no-finisher.status")
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(events.HeaderFinishOwed); got != "completed" {
		t.Fatalf("status event header %s = %q", events.HeaderFinishOwed, got)
	}
	finishes, err := js.Stream(ctx, "JETRUN_FINISH")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := finishes.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the worker published finishes: %+v %v", info.State, err)
	}

	// With a deliverer (its finisher), the next run's finish is published
	// and handled once.
	var calls atomic.Int32
	d, err := finish.New(rt, finish.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.HandleFunc("h", func(ctx context.Context, run *jetruntype.Run, res finish.Result) error {
		calls.Add(1)
		return nil
	})
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	began := time.Now()
	detached(t, client, "with-finisher", "h")
	jetruntest.WaitRow(t, engine.From(rt).Store(), "with-finisher", 10*time.Second, func(r *model.Row) bool {
		return !r.Delivered[events.StatusCompleted].IsZero()
	})
	t.Logf("dispatch to delivered finish: %s", time.Since(began))
	// The row records the delivery before the finish leaves the stream: a
	// copy delivered again would find it delivered and call nothing.
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times", n)
	}
}
