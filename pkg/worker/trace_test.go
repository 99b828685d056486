package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A dispatch's W3C trace context (its headers, its fields, or a
// parent.Request's Trace) reaches the run's row, every event's headers, the
// finish message and webhook call, the handler's context and the run's
// log lines.
func TestTraceContextFollowsTheRun(t *testing.T) {
	t.Parallel()
	const (
		tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts = "vendor=opaque"
	)
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	var (
		mu       sync.Mutex
		inCtx    = map[string]events.TraceContext{} // run id → worker.TraceContext(ctx)
		webhooks = map[string]http.Header{}         // run id → webhook headers
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		webhooks[r.Header.Get("Jetrun-Run-Id")] = r.Header.Clone()
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)

	finishes := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("jetrun.finish.>", finishes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	startWorker(t, nc, worker.Config{Logger: logger}, map[string]worker.Handler{
		"traced": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			mu.Lock()
			inCtx[run.ID()] = worker.TraceContext(ctx)
			mu.Unlock()
			if err := run.Chunk(ctx, "hello"); err != nil {
				return worker.Result{}, err
			}
			run.Logger().InfoContext(ctx, "handler says hello")
			return worker.Result{Summary: "ok"}, nil
		}),
	})
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	d, err := finish.New(rt, finish.Config{RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d.Handle("hook", finish.Webhook(hook.URL, nil))
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := engine.From(rt).Store()

	// 1. NATS headers on a plain published dispatch.
	msg := nats.NewMsg("jetrun.dispatch.traced")
	msg.Data = []byte(`{"runId":"tr-header","input":1,"detached":{"onFinish":"hook"}}`)
	msg.Header.Set("traceparent", tp)
	msg.Header.Set("tracestate", ts)
	if _, err := js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	// 2. Fields in the dispatch JSON, for producers without headers.
	publish(t, js, "jetrun.dispatch.traced",
		`{"runId":"tr-fields","input":1,"detached":{"onFinish":"hook"},"traceparent":"`+tp+`","tracestate":"`+ts+`"}`)
	// 3. The parent API.
	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "traced", RunID: "tr-parent", Input: 1,
		Detached: &events.Detached{OnFinish: "hook"}, Trace: events.TraceContext{TraceParent: tp, TraceState: ts}}); err != nil {
		t.Fatal(err)
	}
	// 4. A malformed traceparent is dropped; the run goes on.
	publish(t, js, "jetrun.dispatch.traced", `{"runId":"tr-junk","input":1,"traceparent":"00-zz"}`)

	want := events.TraceContext{TraceParent: tp, TraceState: ts}
	for _, id := range []string{"tr-header", "tr-fields", "tr-parent"} {
		row := jetruntest.WaitRow(t, store, id, 30*time.Second, jetruntest.Delivered)
		if row.Status != events.StatusCompleted || row.Trace() != want {
			t.Fatalf("%s: row status %s, trace %+v; want completed, %+v", id, row.Status, row.Trace(), want)
		}
		evs := jetruntest.ReadEvents(t, js, id)
		kinds := map[string]bool{}
		for _, ev := range evs {
			kinds[ev.Kind] = true
			if got := wire.TraceFromHeaders(ev.Header); got != want {
				t.Fatalf("%s: %s event %d has trace headers %+v, want %+v", id, ev.Kind, ev.Seq, got, want)
			}
		}
		if !kinds[events.KindStatus] || !kinds[events.KindChunk] {
			t.Fatalf("%s: events %v lack a status or a chunk", id, kinds)
		}
		mu.Lock()
		ctxTC, wh := inCtx[id], webhooks[id]
		mu.Unlock()
		if ctxTC != want {
			t.Fatalf("%s: handler ctx trace %+v; want %+v", id, ctxTC, want)
		}
		if wh.Get("traceparent") != tp || wh.Get("tracestate") != ts {
			t.Fatalf("%s: webhook headers traceparent %q tracestate %q", id, wh.Get("traceparent"), wh.Get("tracestate"))
		}
	}
	seen := map[string]bool{}
	natstest.Eventually(t, 30*time.Second, func() bool {
		select {
		case m := <-finishes:
			var f events.Finish
			if json.Unmarshal(m.Data, &f) == nil && wire.TraceFromHeaders(m.Header) == want {
				seen[f.RunID] = true
			}
		default:
		}
		return seen["tr-header"] && seen["tr-fields"] && seen["tr-parent"]
	}, "finish messages with the trace headers: %v", seen)

	junk := jetruntest.WaitRow(t, store, "tr-junk", 30*time.Second, jetruntest.Final)
	if junk.Status != events.StatusCompleted || junk.TraceParent != "" {
		t.Fatalf("tr-junk: status %s, traceparent %q", junk.Status, junk.TraceParent)
	}

	// The run's log lines carry its trace id.
	traceID := want.TraceID()
	var handlerLine, finishedLine bool
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["run_id"] != "tr-header" {
			continue
		}
		switch rec["msg"] {
		case "handler says hello":
			handlerLine = rec["trace_id"] == traceID
		case "run finished":
			finishedLine = rec["trace_id"] == traceID
		}
	}
	if !handlerLine || !finishedLine {
		t.Fatalf("log lines of tr-header without trace_id %s (handler %v, finished %v):\n%s", traceID, handlerLine, finishedLine, logs)
	}
}
