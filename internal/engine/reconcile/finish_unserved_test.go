package reconcile_test

import (
	"context"
	"encoding/json"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A finish for a handler nobody serves waits as one copy in the finish
// stream however many dedup windows pass; the row and jetrun.obs say the
// handler has not been seen; after the configured wait it is dead-lettered
// with the reason and the run settles.
func TestUnservedFinishWaitsAsOneCopyThenIsDeadLettered(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A short dedup window: without the one-copy rule every republish
	// after it would store another copy.
	streams := events.StreamOptions{DedupWindow: 200 * time.Millisecond, FinishMaxAge: time.Hour}
	if err := wire.EnsureStreams(ctx, js, "", streams); err != nil {
		t.Fatal(err)
	}
	obsSub, err := nc.SubscribeSync("jetrun.obs.finish.>")
	if err != nil {
		t.Fatal(err)
	}
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{Streams: streams})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) { w.Handle(demo.AgentType, demo.Handler()) })
	// A deliverer serving another handler: "ghost" stays unserved.
	d, err := finish.New(rt, finish.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.HandleFunc("present", func(context.Context, *jetruntype.Run, finish.Result) error { return nil })
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	rec, err := reconcile.New(engine.From(rt), reconcile.Config{
		Interval: 100 * time.Millisecond, Logger: slog.New(obs.NewHandler(slog.DiscardHandler, nc, "", "test")),
		FinishUnservedAfter: time.Second, FinishUnservedWait: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Stop() })
	c, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"ghost", "present"} {
		if _, err := c.Dispatch(ctx, parent.Request{AgentType: demo.AgentType, RunID: "to-" + h, Input: map[string]int{"steps": 1},
			Detached: &events.Detached{OnFinish: h}}); err != nil {
			t.Fatal(err)
		}
	}
	jetruntest.WaitRow(t, engine.From(rt).Store(), "to-ghost", 30*time.Second, jetruntest.Final)
	present := jetruntest.WaitRow(t, engine.From(rt).Store(), "to-present", 30*time.Second, func(r *model.Row) bool {
		return !r.Delivered[events.StatusCompleted].IsZero()
	})
	if !present.Finishes[events.StatusCompleted].UnservedSince.IsZero() {
		t.Fatalf("a served handler was reported unserved: %+v", present.Finishes)
	}

	finishStream, err := js.Stream(ctx, "JETRUN_FINISH")
	if err != nil {
		t.Fatal(err)
	}
	copies := func() uint64 {
		t.Helper()
		info, err := finishStream.Info(ctx, jetstream.WithSubjectFilter("jetrun.finish.ghost"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects["jetrun.finish.ghost"]
	}
	sweep := func() reconcile.Stats {
		t.Helper()
		st, err := rec.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// Sweep until the row says the handler has not been seen: many dedup
	// windows pass meanwhile, and one copy waits all along.
	var sweeps int
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "to-ghost", 30*time.Second, func(r *model.Row) bool {
		sweep()
		sweeps++
		if n := copies(); n != 1 {
			t.Fatalf("sweep %d: %d copies of the finish wait in the stream, want 1", sweeps, n)
		}
		return !r.Finishes[events.StatusCompleted].UnservedSince.IsZero()
	})
	fs := row.Finishes[events.StatusCompleted]
	if fs.Seq == 0 || fs.Attempts != 0 || !fs.FailedAt.IsZero() {
		t.Fatalf("ledger while unserved: %+v", fs)
	}
	for {
		msg, err := obsSub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("no finish.unserved event: %v", err)
		}
		var ev obs.Event
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Event == obs.FinishUnserved {
			if ev.RunID != "to-ghost" || ev.Attrs["handler"] != "ghost" {
				t.Fatalf("finish.unserved: %+v", ev)
			}
			break
		}
	}

	// Past the wait: dead-lettered with the reason, gone from the finish
	// stream, recorded on the row; the run settles.
	row = jetruntest.WaitRow(t, engine.From(rt).Store(), "to-ghost", 30*time.Second, func(r *model.Row) bool {
		sweep()
		if n := copies(); n > 1 {
			t.Fatalf("%d copies of the finish wait in the stream", n)
		}
		return !r.Finishes[events.StatusCompleted].FailedAt.IsZero()
	})
	fs = row.Finishes[events.StatusCompleted]
	if !strings.Contains(fs.LastError, `handler "ghost"`) || !row.Settled() {
		t.Fatalf("ledger after the dead letter: %+v", fs)
	}
	if n := copies(); n != 0 {
		t.Fatalf("%d copies left in the finish stream after the dead letter", n)
	}
	dlq, err := js.Stream(ctx, "JETRUN_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlq.GetLastMsgForSubject(ctx, "jetrun.dlq.finish.ghost")
	if err != nil {
		t.Fatal(err)
	}
	var res finish.Result
	if err := json.Unmarshal(m.Data, &res); err != nil || res.RunID != "to-ghost" || res.Status != events.StatusCompleted ||
		!strings.Contains(m.Header.Get(events.HeaderReason), "nothing serves the handler") ||
		m.Header.Get(events.HeaderOriginalMsgID) != "to-ghost.completed" {
		t.Fatalf("dead letter %s %v: %v", m.Data, m.Header, err)
	}
	// Nothing more is published for it.
	for range 3 {
		if st := sweep(); st.Republished != 0 || st.DeadLettered != 0 {
			t.Fatalf("after the dead letter: %+v", st)
		}
	}
	if n := copies(); n != 0 {
		t.Fatalf("%d copies published after the dead letter", n)
	}
}
