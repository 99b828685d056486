package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// counter is a handler that counts executions per run and waits for gate
// (or its context) before completing.
type counter struct {
	mu    sync.Mutex
	runs  map[string]int
	gate  chan struct{}
	cause map[string]error
}

func newCounter() *counter {
	return &counter{runs: map[string]int{}, gate: make(chan struct{}), cause: map[string]error{}}
}

func (c *counter) ServeRun(ctx context.Context, run *worker.Run) (worker.Result, error) {
	c.mu.Lock()
	c.runs[run.ID()]++
	c.mu.Unlock()
	if err := run.Chunk(ctx, "started"); err != nil {
		return worker.Result{}, err
	}
	select {
	case <-c.gate:
		return worker.Result{Summary: "done"}, nil
	case <-ctx.Done():
		c.mu.Lock()
		c.cause[run.ID()] = context.Cause(ctx)
		c.mu.Unlock()
		return worker.Result{}, context.Cause(ctx)
	}
}

func (c *counter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

func running(r *model.Row) bool { return r.Status == events.StatusRunning }

// drained waits until the agent type's consumer has nothing pending or in
// flight: every dispatch was settled.
func drained(t *testing.T, js jetstream.JetStream, agentType string) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, func() bool {
		c, err := js.Consumer(context.Background(), "JETRUN_DISPATCH", wire.AgentConsumer(agentType))
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, "dispatches of %s were not all settled", agentType)
}

func TestSameRunIDIsNeverExecutedAgain(t *testing.T) {
	t.Parallel()
	c := newCounter()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{"count": c})

	publish(t, b.js, "jetrun.dispatch.count", `{"runId":"dup","input":{}}`, jetstream.WithMsgID("first"))
	jetruntest.WaitRow(t, b.store, "dup", 10*time.Second, running)

	// While running: a second dispatch with a new message id.
	publish(t, b.js, "jetrun.dispatch.count", `{"runId":"dup","input":{}}`, jetstream.WithMsgID("second"))
	close(c.gate)
	row := jetruntest.WaitRow(t, b.store, "dup", 10*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("status = %s", row.Status)
	}
	// After completion: a third one.
	publish(t, b.js, "jetrun.dispatch.count", `{"runId":"dup","input":{"other":true}}`, jetstream.WithMsgID("third"))
	drained(t, b.js, "count")

	if n := c.count("dup"); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	evs := waitForStatus(t, b.js, "dup", events.StatusCompleted)
	if got := fmt.Sprint(jetruntest.Statuses(evs)); got != "[running completed]" {
		t.Fatalf("statuses = %s", got)
	}
}

func TestBadDispatchesAreDeadLetteredAndNothingIsLost(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, nil)

	long := strings.Repeat("a", 65)
	bad := []struct{ subject, payload, reason string }{
		{"jetrun.dispatch.demo", `{"runId":`, "malformed JSON"},
		{"jetrun.dispatch.demo", `not json at all`, "not a JSON object"},
		{"jetrun.dispatch.demo", `[1,2,3]`, "not a JSON object"},
		{"jetrun.dispatch.demo", `"a string"`, "not a JSON object"},
		{"jetrun.dispatch.demo", `42`, "not a JSON object"},
		{"jetrun.dispatch.demo", ``, "empty"},
		{"jetrun.dispatch.demo", `{"runId":"a.b","input":{}}`, `'.'`},
		{"jetrun.dispatch.demo", `{"runId":"a*","input":{}}`, `'*'`},
		{"jetrun.dispatch.demo", `{"runId":"a>","input":{}}`, `'>'`},
		{"jetrun.dispatch.demo", `{"runId":"` + long + `","input":{}}`, "65 characters"},
		{"jetrun.dispatch.demo", `{"runId":"ok1"}`, `"input" is required`},
		{"jetrun.dispatch.demo", `{"runId":5,"input":{}}`, `"runId" must be a string`},
		{"jetrun.dispatch.demo", `{"input":{},"depth":"deep"}`, `"depth" must be an integer`},
		{"jetrun.dispatch.demo.extra", `{"runId":"x1","input":{}}`, "does not name a single agent type"},
	}
	for _, d := range bad {
		publish(t, b.js, d.subject, d.payload)
	}
	// The worker keeps serving.
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"good","input":{"steps":1,"stepMs":0}}`)
	if row := jetruntest.WaitRow(t, b.store, "good", 10*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
		t.Fatalf("good run: %s %s", row.Status, row.Error)
	}

	ctx := context.Background()
	natstest.Eventually(t, 10*time.Second, func() bool {
		s, err := b.js.Stream(ctx, "JETRUN_DLQ")
		return err == nil && s.CachedInfo().State.Msgs == uint64(len(bad))
	}, "DLQ did not receive %d messages", len(bad))
	s, err := b.js.Stream(ctx, "JETRUN_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	for i := range bad {
		m, err := s.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatalf("dlq message %d: %v", i+1, err)
		}
		// Delivery order across the two consumers is not fixed; match by payload.
		var want *struct{ subject, payload, reason string }
		for j := range bad {
			if string(m.Data) == bad[j].payload && m.Header.Get(events.HeaderOriginalSubject) == bad[j].subject {
				want = &bad[j]
			}
		}
		if want == nil {
			t.Fatalf("dlq message %q (subject %s) matches no sent payload", m.Data, m.Header.Get(events.HeaderOriginalSubject))
		}
		if reason := m.Header.Get(events.HeaderReason); !strings.Contains(reason, want.reason) {
			t.Errorf("payload %q: reason %q does not mention %q", want.payload, reason, want.reason)
		}
	}
	// Nothing left in the queue, nothing silently dropped.
	disp, err := b.js.Stream(ctx, "JETRUN_DISPATCH")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		info, err := disp.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, "dispatch stream not empty")
}

func TestHandlerErrorPanicAndBadInputEndInError(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"boom": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			panic("kaboom at the factory")
		}),
		"fail": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, errors.New("upstream said no")
		}),
	})
	publish(t, b.js, "jetrun.dispatch.boom", `{"runId":"p1","input":{}}`)
	publish(t, b.js, "jetrun.dispatch.fail", `{"runId":"f1","input":{}}`)
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"d1","input":{"steps":"five"}}`)
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"d2","input":{"steps":3,"stepMs":0,"failAt":2}}`)
	publish(t, b.js, "jetrun.dispatch.boom", `{"runId":"p2","input":{}}`) // the worker lives on

	for id, want := range map[string]string{
		"p1": "panic: kaboom at the factory",
		"p2": "panic: kaboom at the factory",
		"f1": "upstream said no",
		"d1": `demo input field "steps" must be an integer, got string`,
		"d2": "step 2 failed",
	} {
		row := jetruntest.WaitRow(t, b.store, id, 10*time.Second, jetruntest.Final)
		if row.Status != events.StatusError || !strings.Contains(row.Error, want) {
			t.Errorf("%s: status %s error %q, want error containing %q", id, row.Status, row.Error, want)
		}
		if f := row.Failure(); f == nil || f.Retryable {
			t.Errorf("%s: failure %+v, want non-retryable", id, f)
		}
	}
}

func TestFinalRowGetsItsMissingStatusEventAndIsNotRun(t *testing.T) {
	t.Parallel()
	c := newCounter()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{"count": c})
	ctx := context.Background()
	// A writer that died between the final row write and its status event.
	if _, err := b.store.Create(ctx, &model.Row{
		ID: "fin", AgentType: "count", Status: events.StatusCompleted, Attempt: 1, CreatedAt: time.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	publish(t, b.js, "jetrun.dispatch.count", `{"runId":"fin","input":{}}`)
	drained(t, b.js, "count")
	evs := waitForStatus(t, b.js, "fin", events.StatusCompleted)
	if len(evs) != 1 || c.count("fin") != 0 {
		t.Fatalf("events %d, executions %d; want 1 repaired status event, 0 executions", len(evs), c.count("fin"))
	}
}

func TestRunLostTooOftenEndsInError(t *testing.T) {
	t.Parallel()
	c := newCounter()
	b, _ := setup(t, worker.Config{MaxAttempts: 3}, map[string]worker.Handler{"count": c})
	ctx := context.Background()
	if _, err := b.store.Create(ctx, &model.Row{
		ID: "crashy", AgentType: "count", Status: events.StatusRunning, Attempt: 3, Worker: "gone",
		LeaseUntil: time.Now().Add(-time.Second), CreatedAt: time.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	publish(t, b.js, "jetrun.dispatch.count", `{"runId":"crashy","input":{}}`)
	row := jetruntest.WaitRow(t, b.store, "crashy", 10*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || row.Reason != events.ReasonMaxAttempts || c.count("crashy") != 0 {
		t.Fatalf("row %+v, executions %d", row, c.count("crashy"))
	}
}

func TestProgressIsCoalescedWithATrailingFlush(t *testing.T) {
	t.Parallel()
	const reports = 200
	flushed := make(chan struct{})
	b, _ := setup(t, worker.Config{ProgressInterval: 100 * time.Millisecond}, map[string]worker.Handler{
		"burst": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for i := 1; i <= reports; i++ {
				if err := run.Progress(ctx, worker.Progress{Fraction: float64(i) / (reports + 1), Message: fmt.Sprint(i)}); err != nil {
					return worker.Result{}, err
				}
			}
			// Stay alive until the trailing value is out: it must go out on
			// its own, not only because the run ends.
			select {
			case <-flushed:
				return worker.Result{}, nil
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		}),
	})
	publish(t, b.js, "jetrun.dispatch.burst", `{"runId":"pr","input":{}}`)
	jetruntest.WaitRow(t, b.store, "pr", 10*time.Second, func(r *model.Row) bool {
		return r.Progress != nil && r.Progress.Message == fmt.Sprint(reports)
	})
	close(flushed)
	jetruntest.WaitRow(t, b.store, "pr", 10*time.Second, jetruntest.Final)
	evs := waitForStatus(t, b.js, "pr", events.StatusCompleted)
	var msgs []string
	for _, e := range evs {
		if e.Progress != nil {
			msgs = append(msgs, e.Progress.Message)
		}
	}
	if len(msgs) < 2 || len(msgs) > reports/2 {
		t.Fatalf("%d progress events for %d reports: %v", len(msgs), reports, msgs)
	}
	if msgs[0] != "1" || msgs[len(msgs)-1] != fmt.Sprint(reports) {
		t.Fatalf("progress events %v: want the first report and the trailing last one", msgs)
	}
	// The trailing flush came before the final status, during the sleep.
	if last := evs[len(evs)-2]; last.Progress == nil || last.Progress.Message != fmt.Sprint(reports) {
		t.Fatalf("event before the final status = %+v", last)
	}
}

// FleetConcurrency caps the runs of an agent type in flight across every
// worker process, whatever each worker's own concurrency.
func TestFleetConcurrencyCapsRunsAcrossWorkers(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	var (
		mu           sync.Mutex
		inFlight, hi int
	)
	gate := make(chan struct{})
	h := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		mu.Lock()
		inFlight++
		hi = max(hi, inFlight)
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return worker.Result{}, nil
	})
	cfg := worker.Config{Concurrency: 5, FleetConcurrency: 2}
	var js jetstream.JetStream
	for range 2 {
		nc, j := natstest.Connect(t, ns)
		js = j
		startWorker(t, nc, cfg, map[string]worker.Handler{"capped": h})
	}
	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		publish(t, js, "jetrun.dispatch.capped", fmt.Sprintf(`{"runId":"cap%d","input":{}}`, i))
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inFlight == 2
	}, "two runs never started")
	// Give a third run every chance to start: the consumer must not deliver it.
	c, err := js.Consumer(context.Background(), "JETRUN_DISPATCH", wire.AgentConsumer("capped"))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending == 2 && info.NumPending == 4 && info.NumWaiting > 0
	}, "consumer state")
	close(gate)
	for i := range 6 {
		jetruntest.WaitRow(t, store, fmt.Sprintf("cap%d", i), 20*time.Second, jetruntest.Final)
	}
	mu.Lock()
	defer mu.Unlock()
	if hi != 2 {
		t.Fatalf("%d runs in flight at once, want at most 2", hi)
	}
}

// At concurrency 1 an attempt gives its slot back when its handler
// returns, and stores its end outside it: handlers still never overlap,
// and every run of a plain-published burst ends with its "running" first
// on its timeline and recorded as the row's first event.
func TestConcurrencyBoundsHandlersWhileEndsAreStored(t *testing.T) {
	t.Parallel()
	var (
		mu          sync.Mutex
		inside, top int
	)
	b, _ := setup(t, worker.Config{Concurrency: 1}, map[string]worker.Handler{
		"one": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			mu.Lock()
			inside++
			top = max(top, inside)
			mu.Unlock()
			defer func() {
				mu.Lock()
				inside--
				mu.Unlock()
			}()
			if err := run.Chunk(ctx, "hello"); err != nil { // fenced on a "running" maybe still in flight
				return worker.Result{}, err
			}
			return worker.Result{Summary: "done"}, nil
		}),
	})
	const n = 12
	for i := range n {
		publish(t, b.js, "jetrun.dispatch.one", fmt.Sprintf(`{"runId":"one-%d","input":{}}`, i))
	}
	for i := range n {
		id := fmt.Sprintf("one-%d", i)
		row := jetruntest.WaitRow(t, b.store, id, 20*time.Second, jetruntest.Final)
		if row.Status != events.StatusCompleted || row.Chunks != 1 {
			t.Fatalf("run %s: status %s, %d chunks", id, row.Status, row.Chunks)
		}
		evs := waitForStatus(t, b.js, id, events.StatusCompleted)
		if got := fmt.Sprint(jetruntest.Statuses(evs)); got != "[running completed]" {
			t.Fatalf("run %s: statuses = %s", id, got)
		}
		if evs[0].Status == nil || evs[0].Seq != row.FirstEventSeq {
			t.Fatalf("run %s: first event %+v, row.firstEventSeq %d", id, evs[0], row.FirstEventSeq)
		}
	}
	drained(t, b.js, "one")
	mu.Lock()
	defer mu.Unlock()
	if top != 1 {
		t.Fatalf("%d handlers ran at once at concurrency 1", top)
	}
}

// A run whose handler waits and publishes nothing gets its row's
// firstEventSeq (where a replay of it starts) while it waits: its
// "running" went out as the handler started, and its acknowledgement is
// taken up by the worker's heartbeat, not by the run's next event.
func TestWaitingRunRecordsItsFirstEvent(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"waits": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return worker.Result{}, nil
		}),
	})
	publish(t, b.js, "jetrun.dispatch.waits", `{"runId":"w1","input":{}}`)
	row := jetruntest.WaitRow(t, b.store, "w1", 30*time.Second, func(r *model.Row) bool { return r.FirstEventSeq != 0 })
	if row.Status != events.StatusRunning {
		t.Fatalf("row %+v, want running", row)
	}
	evs := jetruntest.ReadEvents(t, b.js, "w1")
	if len(evs) != 1 || evs[0].Status == nil || evs[0].Seq != row.FirstEventSeq {
		t.Fatalf("events %+v, row.firstEventSeq %d: want its running event", evs, row.FirstEventSeq)
	}
}

// A plain-published dispatch of a run cleared after it was published is
// dropped on its first delivery: the worker reads the run's tombstone
// beside the create that claims it, deletes the row it made, and never
// runs the handler. The same holds for the row such a create left behind
// when its worker was killed before deleting it: the takeover reads the
// tombstone and deletes it. A dispatch published after the clear runs.
func TestDispatchOfAClearedRunIsDropped(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx := context.Background()
	jetruntest.OpenRuntime(t, nc, jetrun.Config{}) // the streams, before any worker
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "jetrun.dispatch.gone", []byte(`{"runId":"g1","input":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	// g1 was erased after its dispatch was published, as Runtime.Erase
	// does it: the tombstone, then its row removed (a deletion marker).
	g1 := model.NewRun("gone", events.Dispatch{RunID: "g1", Input: json.RawMessage(`{}`)}, ack.Sequence, time.Now())
	if _, err := store.Create(ctx, g1); err != nil {
		t.Fatal(err)
	}
	if err := store.Index().Tombstone(ctx, "g1", ack.Sequence); err != nil {
		t.Fatal(err)
	}
	if err := store.Erase(ctx, g1); err != nil {
		t.Fatal(err)
	}
	// g3's create landed, then its worker died before deleting the row.
	d3 := events.Dispatch{RunID: "g3", Input: json.RawMessage(`{}`)}
	ack3, err := js.Publish(ctx, "jetrun.dispatch.gone", []byte(`{"runId":"g3","input":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Index().Tombstone(ctx, "g3", ack3.Sequence); err != nil {
		t.Fatal(err)
	}
	left := model.NewRun("gone", d3, ack3.Sequence, time.Now())
	left.Unindexed, left.Status, left.Attempt = true, events.StatusRunning, 1
	left.Worker, left.WorkerEpoch, left.StartedAt = "killed-worker", "e1", time.Now()
	if _, err := store.Create(ctx, left); err != nil {
		t.Fatal(err)
	}
	publish(t, js, "jetrun.dispatch.gone", `{"runId":"g2","input":{}}`)

	var mu sync.Mutex
	var ran []string
	startWorker(t, nc, worker.Config{}, map[string]worker.Handler{
		"gone": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			mu.Lock()
			ran = append(ran, run.ID())
			mu.Unlock()
			return worker.Result{}, nil
		}),
	})
	jetruntest.WaitRow(t, store, "g2", 30*time.Second, jetruntest.Final)
	drained(t, js, "gone")
	for _, id := range []string{"g1", "g3"} {
		if _, _, err := store.Get(ctx, id); !errors.Is(err, runstore.ErrRunNotFound) {
			t.Fatalf("the cleared run %s's row: %v, want not found", id, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(ran) != "[g2]" {
		t.Fatalf("handler ran for %v, want only g2", ran)
	}
}

// A run given up while its child runs (interrupted, childStillRunning,
// its worker told to stop) whose worker is stopped before it heard of the
// give-up is handed back like any run in flight, and then no child runs
// any more: the row says so at once (a caller awaiting it has its answer,
// a retry may resume it), not only when the reconciler looks.
func TestAHandBackOfAGivenUpRunStopsItsChild(t *testing.T) {
	t.Parallel()
	blocked := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		<-ctx.Done()
		return worker.Result{}, context.Cause(ctx)
	})
	// No row sync: the give-up below reaches the worker only by its cancel
	// event, which this test does not send (as if it were lost).
	b, w := setup(t, worker.Config{RowSyncInterval: time.Hour}, map[string]worker.Handler{"blocked": blocked})
	publish(t, b.js, "jetrun.dispatch.blocked", `{"runId":"gu1","input":{}}`)
	held := jetruntest.WaitRow(t, b.store, "gu1", 10*time.Second, func(r *model.Row) bool { return r.Worker != "" })
	gaveUp := model.GaveUp{Reason: events.ReasonNoProgress, Error: "silent", Held: true}
	row, _, err := b.store.Mutate(t.Context(), "gu1", model.Mutation(time.Now(), gaveUp))
	if err != nil || row.Status != events.StatusInterrupted || !row.ChildStillRunning || row.Worker != held.Worker {
		t.Fatalf("give-up: %+v %v", row, err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	row, _, err = b.store.Get(t.Context(), "gu1")
	if err != nil || row.Status != events.StatusInterrupted || row.Worker != "" || row.ChildStillRunning {
		t.Fatalf("handed back: status %s, worker %q, childStillRunning %v (%v)", row.Status, row.Worker, row.ChildStillRunning, err)
	}
}
