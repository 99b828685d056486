package parent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gated counts executions and completes a run once its gate opens.
type gated struct {
	mu    sync.Mutex
	runs  map[string]int
	gates map[string]chan struct{}
}

func (g *gated) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[id] == nil {
		g.gates[id] = make(chan struct{})
	}
	return g.gates[id]
}

func (g *gated) count(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runs[id]
}

func (g *gated) ServeRun(ctx context.Context, run *worker.Run) (worker.Result, error) {
	g.mu.Lock()
	g.runs[run.ID()]++
	g.mu.Unlock()
	select {
	case <-g.gate(run.ID()):
		return worker.Result{Summary: "opened " + run.ID(), Output: map[string]string{"id": run.ID()}}, nil
	case <-ctx.Done():
		return worker.Result{}, context.Cause(ctx)
	}
}

type bundle struct {
	nc     *nats.Conn
	rt     *jetrun.Runtime
	js     jetstream.JetStream
	client *parent.Client
	store  *runstore.Store
	gated  *gated
	worker *worker.Worker
}

func setup(t *testing.T) *bundle {
	t.Helper()
	env := jetruntest.NewEnv(t)
	g := &gated{runs: map[string]int{}, gates: map[string]chan struct{}{}}
	w := env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
		w.Handle("gated", g)
	})
	return &bundle{nc: env.Conn, rt: env.Runtime, js: env.JS, client: env.Client, store: env.Store, gated: g, worker: w}
}

func TestRunReturnsResultAndIsIdempotentByRunID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	close(b.gated.gate("once"))

	res, err := b.client.Run(ctx, parent.Request{AgentType: "gated", RunID: "once", Input: map[string]int{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if res.Summary != "opened once" || json.Unmarshal(res.Output, &out) != nil || out["id"] != "once" {
		t.Fatalf("result = %+v", res)
	}
	// Same id, different input: the stored result, no second execution.
	again, err := b.client.Run(ctx, parent.Request{AgentType: "gated", RunID: "once", Input: map[string]int{"n": 2}})
	if err != nil || again.Summary != res.Summary {
		t.Fatalf("again = %+v, %v", again, err)
	}
	if n := b.gated.count("once"); n != 1 {
		t.Fatalf("executions = %d", n)
	}
}

func TestRunReattachesToALiveRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	d, err := b.client.Dispatch(ctx, parent.Request{AgentType: "gated", RunID: "live", Input: struct{}{}})
	if err != nil || !d.Created || d.Run.Status.Final() {
		t.Fatalf("dispatch: %+v %v", d, err)
	}
	jetruntest.WaitRow(t, b.store, "live", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })

	done := make(chan error, 2)
	for range 2 {
		go func() {
			res, err := b.client.Run(ctx, parent.Request{AgentType: "gated", RunID: "live", Input: struct{}{}})
			if err == nil && res.Summary != "opened live" {
				err = fmt.Errorf("summary %q", res.Summary)
			}
			done <- err
		}()
	}
	close(b.gated.gate("live"))
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := b.gated.count("live"); n != 1 {
		t.Fatalf("executions = %d", n)
	}
}

func TestRunReturnsFailureValue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Run(t.Context(), parent.Request{AgentType: "demo", Input: map[string]int{"steps": 2, "stepMs": 0, "failAt": 2}})
	var f *parent.Failure
	ok := errors.As(err, &f)
	if !ok {
		t.Fatalf("err = %v, want a *Failure", err)
	}
	if f.OK || f.Status != events.StatusError || f.Retryable || !strings.Contains(f.Message, "step 2 failed") {
		t.Fatalf("failure = %+v", f)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	t.Run("running run ends aborted, idempotently", func(t *testing.T) {
		if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "gated", RunID: "c1", Input: 1}); err != nil {
			t.Fatal(err)
		}
		jetruntest.WaitRow(t, b.store, "c1", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
		start := time.Now()
		for range 3 {
			if _, err := b.client.Cancel(ctx, "c1", "user pressed stop"); err != nil {
				t.Fatal(err)
			}
		}
		_, err := b.client.Await(ctx, "c1")
		var f *parent.Failure
		ok := errors.As(err, &f)
		if !ok || f.Status != events.StatusAborted || f.Retryable || !strings.Contains(f.Message, "user pressed stop") {
			t.Fatalf("await: %v", err)
		}
		t.Logf("cancel → aborted in %s", time.Since(start))
		evs := jetruntest.ReadEvents(t, b.js, "c1")
		natstest.Eventually(t, 5*time.Second, func() bool {
			evs = jetruntest.ReadEvents(t, b.js, "c1")
			return fmt.Sprint(jetruntest.Statuses(evs)) == "[running aborted]"
		}, "statuses %v", jetruntest.Statuses(evs))
		if _, err := b.client.Cancel(ctx, "c1", "again"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("completed run is never rewritten", func(t *testing.T) {
		close(b.gated.gate("c2"))
		if _, err := b.client.Run(ctx, parent.Request{AgentType: "gated", RunID: "c2", Input: 1}); err != nil {
			t.Fatal(err)
		}
		row, err := b.client.Cancel(ctx, "c2", "too late")
		if err != nil || row.Status != events.StatusCompleted || row.CancelRequested {
			t.Fatalf("cancel of completed: %+v %v", row, err)
		}
	})

	t.Run("a run no worker started is aborted at once", func(t *testing.T) {
		// "later" is a known agent type whose workers are all gone.
		w := jetruntest.StartWorker(t, b.rt, worker.Config{}, func(w *worker.Worker) {
			w.HandleFunc("later", func(ctx context.Context, run *worker.Run) (worker.Result, error) { return worker.Result{}, nil })
		})
		if err := w.Stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "later", RunID: "c3", Input: 1}); err != nil {
			t.Fatal(err)
		}
		row, err := b.client.Cancel(ctx, "c3", "")
		if err != nil || row.Status != events.StatusAborted {
			t.Fatalf("cancel of starting: %+v %v", row, err)
		}
	})

	t.Run("unknown run", func(t *testing.T) {
		if _, err := b.client.Cancel(ctx, "nope", ""); !errors.Is(err, runstore.ErrRunNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestCallerContextCancelsTheChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := b.client.Run(ctx, parent.Request{AgentType: "gated", RunID: "cc", Input: 1})
		errc <- err
	}()
	jetruntest.WaitRow(t, b.store, "cc", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	row := jetruntest.WaitRow(t, b.store, "cc", 10*time.Second, jetruntest.Final)
	if row.Status != events.StatusAborted {
		t.Fatalf("status = %s", row.Status)
	}
}

func TestRunAllSettlesEveryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reqs := []parent.Request{
		{AgentType: "demo", Input: map[string]int{"steps": 2, "stepMs": 10}},
		{AgentType: "demo", Input: map[string]int{"steps": 3, "stepMs": 0, "failAt": 1}},
		{AgentType: "nosuch", Input: 1},
		{AgentType: "demo", RunID: "bad.id", Input: 1},
		{AgentType: "demo", Input: map[string]int{"steps": 1, "stepMs": 50}},
	}
	out := b.client.RunAll(t.Context(), reqs)
	if len(out) != len(reqs) {
		t.Fatalf("%d outcomes", len(out))
	}
	if out[0].Err != nil || out[0].Result.Summary != "finished 2 steps" {
		t.Fatalf("0: %+v", out[0])
	}
	var f *parent.Failure
	if !errors.As(out[1].Err, &f) || f.Status != events.StatusError {
		t.Fatalf("1: %+v", out[1])
	}
	if !errors.Is(out[2].Err, parent.ErrUnknownAgentType) {
		t.Fatalf("2: %v", out[2].Err)
	}
	if !errors.Is(out[3].Err, parent.ErrBadRequest) || !errors.Is(out[3].Err, events.ErrInvalidID) {
		t.Fatalf("3: %v", out[3].Err)
	}
	if out[4].Err != nil {
		t.Fatalf("4: %+v", out[4])
	}
}

func TestInspectUnknownAndMalformedIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	row, err := b.client.Inspect(ctx, "never-dispatched")
	if row != nil || !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("inspect unknown = %+v, %v; want nil, ErrRunNotFound", row, err)
	}
	for _, id := range []string{"a.b", "*", ""} {
		if row, err := b.client.Inspect(ctx, id); row != nil || !errors.Is(err, events.ErrInvalidID) {
			t.Fatalf("Inspect(%q) = %+v, %v; want events.ErrInvalidID", id, row, err)
		}
	}
	if _, err := b.client.Run(ctx, parent.Request{AgentType: "demo", RunID: "seen", Input: map[string]int{"steps": 1, "stepMs": 0}}); err != nil {
		t.Fatal(err)
	}
	if row, err := b.client.Inspect(ctx, "seen"); err != nil || row.ID != "seen" {
		t.Fatalf("Inspect(seen) = %+v, %v", row, err)
	}
	// Neither call created anything.
	if row, err := b.client.Inspect(ctx, "never-dispatched"); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("inspect created a row: %+v, %v", row, err)
	}
}

func TestStartingRowLeftByADeadCallerIsDispatchedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	// The caller created the row and died before publishing.
	if _, err := b.store.Create(ctx, &model.Row{
		ID: "orphan", AgentType: "demo", Status: events.StatusStarting, CreatedAt: time.Now(),
		Input: []byte(`{"steps":1,"stepMs":0}`),
	}); err != nil {
		t.Fatal(err)
	}
	res, err := b.client.Run(ctx, parent.Request{AgentType: "demo", RunID: "orphan", Input: map[string]int{"steps": 9}})
	if err != nil || res.Summary != "finished 1 step" {
		t.Fatalf("run: %+v %v (the stored input must win)", res, err)
	}
}

// A run waiting for a signal whose worker died (the row a killed worker
// leaves) is aborted at once by a cancel, and an aborted run waits for
// nothing: its row (jetrun inspect, the MCP task, the web UI) no longer
// shows the wait.
func TestCancelOfAWaitingRunWhoseWorkerDiedEndsItsWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := b.store.Create(ctx, &model.Row{
		ID: "waited", AgentType: "gated", Status: events.StatusRunning, Attempt: 1, Worker: "gone", WorkerEpoch: "e0",
		WaitingFor: "approve", CreatedAt: now, StartedAt: now,
	}); err != nil {
		t.Fatal(err)
	}
	if row, err := b.client.Cancel(ctx, "waited", "user"); err != nil || row.Status != events.StatusAborted {
		t.Fatalf("cancel: %+v %v", row, err)
	}
	row, err := b.client.Inspect(ctx, "waited")
	if err != nil || row.Status != events.StatusAborted || row.WaitingFor != "" {
		t.Fatalf("aborted run: status %s, waiting for %q (%v)", row.Status, row.WaitingFor, err)
	}
}

func TestDispatchThatCannotBePublishedEndsTheRun(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx := t.Context()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	c, err := parent.New(rt, parent.Config{DispatchRetry: 200 * time.Millisecond, AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "JETRUN_DISPATCH"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: "nopub", Input: 1})
	if !errors.Is(err, parent.ErrDispatchFailed) {
		t.Fatalf("err = %v", err)
	}
	row, err := c.Inspect(ctx, "nopub")
	if err != nil || row.Status != events.StatusError || row.Reason != events.ReasonDispatchFailed {
		t.Fatalf("row = %+v, %v", row, err)
	}
}

func TestUnknownAgentTypeIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Dispatch(t.Context(), parent.Request{AgentType: "ghost", Input: 1})
	if !errors.Is(err, parent.ErrUnknownAgentType) {
		t.Fatalf("err = %v", err)
	}
}

// An agent type whose consumer is gone while a live worker announces it
// (someone deleted the consumer; it is being restored) is not unknown: the
// dispatch is stored, and the run completes once the consumer is back.
func TestAnAnnouncedAgentTypeWhoseConsumerIsGoneIsNotUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	if err := b.js.DeleteConsumer(ctx, "JETRUN_DISPATCH", "agent-"+demo.AgentType); err != nil {
		t.Fatal(err)
	}
	// A client that has not looked the type up yet (no cached answer).
	c, err := parent.New(b.rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Dispatch(ctx, parent.Request{AgentType: demo.AgentType, RunID: "consumer-gone", Input: map[string]int{"steps": 1}})
	if err != nil {
		t.Fatalf("dispatch while the consumer is gone: %v", err)
	}
	if !d.Created {
		t.Fatalf("dispatch: %+v", d)
	}
	jetruntest.WaitRow(t, b.store, "consumer-gone", 30*time.Second, jetruntest.Final)
	if row, err := c.Inspect(ctx, "consumer-gone"); err != nil || row.Status != events.StatusCompleted {
		t.Fatalf("row = %+v, %v", row, err)
	}
}

func TestRunIDIsStableAndValid(t *testing.T) {
	a, b := parent.RunID("parent-1", "call-1"), parent.RunID("parent-1", "call-1")
	if a != b || events.ValidateID(a) != nil {
		t.Fatalf("RunID = %q, %q", a, b)
	}
	if parent.RunID("parent-1", "call-2") == a || parent.RunID("parent-", "1call-1") == a {
		t.Fatal("distinct tool calls share a run id")
	}
}

func FuzzRunID(f *testing.F) {
	f.Add("p", "call-1")
	f.Add("", "")
	f.Add("a.b.>", "*\x00 ")
	f.Fuzz(func(t *testing.T, p, call string) {
		if err := events.ValidateID(parent.RunID(p, call)); err != nil {
			t.Fatal(err)
		}
	})
}

// A run cleared before any worker took it never comes back when a worker
// shows up later.
func TestClearedRunIsNotRecreatedByItsDispatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ran := make(chan string, 4)
	h := func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		ran <- run.ID()
		return worker.Result{}, nil
	}
	// The agent type exists, but its only worker is gone.
	w := jetruntest.StartWorker(t, b.rt, worker.Config{}, func(w *worker.Worker) { w.HandleFunc("later", h) })
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gone", "kept"} {
		if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "later", RunID: id, Input: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Clear one of the two queued runs, then bring a worker back.
	if _, err := b.client.Cancel(ctx, "gone", "not needed"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.client.Clear(ctx, parent.ClearFilter{Statuses: []events.Status{events.StatusAborted}}); err != nil || n != 1 {
		t.Fatalf("clear = %d, %v", n, err)
	}
	jetruntest.StartWorker(t, b.rt, worker.Config{}, func(w *worker.Worker) { w.HandleFunc("later", h) })
	if row := jetruntest.WaitRow(t, b.store, "kept", 10*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
		t.Fatalf("kept: %s", row.Status)
	}
	if got := <-ran; got != "kept" {
		t.Fatalf("ran %s", got)
	}
	if row, err := b.client.Inspect(ctx, "gone"); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("the cleared run came back: %+v, %v", row, err)
	}
	select {
	case id := <-ran:
		t.Fatalf("%s ran", id)
	default:
	}
}

// A top-level run that is not detached is dispatched before its row is
// written and is never entered in the active-run index; concurrent
// Dispatches of its id still start one execution, and exactly one reports
// that it created the run.
func TestPlainDispatchWritesNoIndexAndStartsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	creators := 0
	for range n {
		wg.Go(func() {
			d, err := b.client.Dispatch(ctx, parent.Request{AgentType: "gated", RunID: "plain", Input: struct{}{}})
			if err != nil || d.Run == nil || d.Run.ID != "plain" {
				t.Errorf("dispatch: %+v %v", d, err)
				return
			}
			if d.Created {
				mu.Lock()
				creators++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if creators != 1 {
		t.Fatalf("%d Dispatches report creating the run, want 1", creators)
	}
	if ok, err := jetruntest.HasRun(ctx, b.client, "plain"); err != nil || !ok {
		t.Fatalf("has run: %v %v", ok, err)
	}
	jetruntest.WaitRow(t, b.store, "plain", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	active, err := b.store.Index().Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range active {
		if e.ID == "plain" {
			t.Fatalf("a plain run is in the active-run index: %+v", active)
		}
	}
	close(b.gated.gate("plain"))
	res, err := b.client.Run(ctx, parent.Request{AgentType: "gated", RunID: "plain", Input: struct{}{}})
	if err != nil || res.Summary != "opened plain" {
		t.Fatalf("run: %+v %v", res, err)
	}
	if c := b.gated.count("plain"); c != 1 {
		t.Fatalf("executions = %d", c)
	}
}
