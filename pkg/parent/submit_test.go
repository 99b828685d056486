package parent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/keys"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// serial records the runs of agent type "serial": the order they started
// in, their inputs, and the most that ever ran at once. A run waits for its
// gate unless the gates are open.
type serial struct {
	mu      sync.Mutex
	live    int
	maxLive int
	started []string
	inputs  map[string]json.RawMessage
	gates   map[string]chan struct{}
	open    bool
}

func newSerial(open bool) *serial {
	return &serial{inputs: map[string]json.RawMessage{}, gates: map[string]chan struct{}{}, open: open}
}

func (s *serial) gate(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gates[id] == nil {
		s.gates[id] = make(chan struct{})
	}
	return s.gates[id]
}

func (s *serial) snapshot() (started []string, maxLive int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.started), s.maxLive
}

func (s *serial) input(id string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inputs[id]
}

func (s *serial) ServeRun(ctx context.Context, run *worker.Run) (worker.Result, error) {
	s.mu.Lock()
	s.live++
	s.maxLive = max(s.maxLive, s.live)
	s.started = append(s.started, run.ID())
	s.inputs[run.ID()] = run.Input()
	open := s.open
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.live--
		s.mu.Unlock()
	}()
	if !open {
		select {
		case <-s.gate(run.ID()):
		case <-ctx.Done():
			return worker.Result{}, context.Cause(ctx)
		}
	}
	return worker.Result{Summary: "ran " + run.ID()}, nil
}

// keyedFleet is one server, two workers and two parent clients, all
// serving "serial".
type keyedFleet struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	clients []*parent.Client
	store   *runstore.Store
	serial  *serial
}

func setupKeyed(t *testing.T, open bool) *keyedFleet {
	t.Helper()
	srv := natstest.RunServer(t)
	f := &keyedFleet{serial: newSerial(open)}
	for i := range 2 {
		nc, js := natstest.Connect(t, srv)
		if i == 0 {
			f.nc, f.js = nc, js
		}
		rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
		jetruntest.StartWorker(t, rt, worker.Config{ID: fmt.Sprintf("w%d", i)}, func(w *worker.Worker) { w.Handle("serial", f.serial) })
		c, err := parent.New(rt, parent.Config{})
		if err != nil {
			t.Fatal(err)
		}
		f.clients = append(f.clients, c)
		if i == 0 {
			f.store = engine.From(rt).Store()
		}
	}
	return f
}

func (f *keyedFleet) submit(t *testing.T, i int, id string, strategy events.Strategy, input any) *jetruntype.Run {
	t.Helper()
	d, err := f.clients[i%2].Dispatch(t.Context(), parent.Request{
		AgentType: "serial", RunID: id, Input: input, ConcurrencyKey: "chat-1", Strategy: strategy,
	})
	if err != nil {
		t.Fatalf("dispatch %s: %v", id, err)
	}
	return d.Run
}

func waitStatus(t *testing.T, store *runstore.Store, id string, s events.Status) *model.Row {
	t.Helper()
	return jetruntest.WaitRow(t, store, id, 30*time.Second, func(r *model.Row) bool { return r.Status == s })
}

// Queue: submits from two clients, run by two workers, execute one at a
// time in the order they were submitted.
func TestKeyQueueRunsOneAtATimeInOrder(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, true)
	var ids []string
	for i := range 8 {
		id := fmt.Sprintf("q%d", i)
		ids = append(ids, id)
		f.submit(t, i, id, events.StrategyQueue, map[string]int{"n": i})
	}
	for _, id := range ids {
		if r := jetruntest.WaitRow(t, f.store, id, 60*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
			t.Fatalf("%s ended %s: %s", id, r.Status, r.Error)
		}
	}
	started, maxLive := f.serial.snapshot()
	if !slices.Equal(started, ids) || maxLive != 1 {
		t.Fatalf("started %v with at most %d at once; want %v one at a time", started, maxLive, ids)
	}
	assertSerialOnTimeline(t, f.js, ids)
}

// assertSerialOnTimeline checks on the events stream that each run started
// only after the one before it ended.
func assertSerialOnTimeline(t *testing.T, js jetstream.JetStream, ids []string) {
	t.Helper()
	var prevEnd uint64
	for _, id := range ids {
		var firstRunning, end uint64
		for _, ev := range jetruntest.ReadEvents(t, js, id) {
			if ev.Status == nil {
				continue
			}
			if ev.Status.Status == events.StatusRunning && firstRunning == 0 {
				firstRunning = ev.Seq
			}
			if ev.Status.Status.Final() {
				end = ev.Seq
			}
		}
		if firstRunning == 0 || end == 0 || firstRunning < prevEnd {
			t.Fatalf("%s: running at seq %d, ended at %d; the run before ended at %d", id, firstRunning, end, prevEnd)
		}
		prevEnd = end
	}
}

// Latest: newer submits supersede the queued ones; the running one
// finishes.
func TestKeyLatestSupersedesQueuedRuns(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, false)
	f.submit(t, 0, "l0", events.StrategyLatest, 0)
	waitStatus(t, f.store, "l0", events.StatusRunning)
	for i, id := range []string{"l1", "l2", "l3"} {
		if row := f.submit(t, i+1, id, events.StrategyLatest, i+1); row.Status != events.StatusQueued {
			t.Fatalf("%s: %s, want queued", id, row.Status)
		}
	}
	for _, id := range []string{"l1", "l2"} {
		r := jetruntest.WaitRow(t, f.store, id, 30*time.Second, jetruntest.Final)
		if r.Status != events.StatusAborted || r.Reason != events.ReasonSuperseded || r.SupersededBy == "" {
			t.Fatalf("%s: %s/%s by %q; want aborted/superseded", id, r.Status, r.Reason, r.SupersededBy)
		}
		_, err := f.clients[0].Run(t.Context(), parent.Request{AgentType: "serial", RunID: id, Input: 0})
		var fail *parent.Failure
		if !errors.As(err, &fail) || fail.Reason != events.ReasonSuperseded {
			t.Fatalf("Run(%s) = %v; want the superseded failure", id, err)
		}
	}
	if r, _ := f.clients[0].Inspect(t.Context(), "l3"); r.Status != events.StatusQueued {
		t.Fatalf("l3: %s, want queued behind l0", r.Status)
	}
	close(f.serial.gate("l0"))
	close(f.serial.gate("l3"))
	for _, id := range []string{"l0", "l3"} {
		if r := jetruntest.WaitRow(t, f.store, id, 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
			t.Fatalf("%s ended %s", id, r.Status)
		}
	}
	if started, maxLive := f.serial.snapshot(); !slices.Equal(started, []string{"l0", "l3"}) || maxLive != 1 {
		t.Fatalf("started %v, at most %d at once", started, maxLive)
	}
}

// Drop: refused with ErrKeyBusy while a run of the key is live; no row is
// left; accepted again once the key is free.
func TestKeyDropRefusesWhileLive(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, false)
	f.submit(t, 0, "d0", events.StrategyDrop, 0)
	waitStatus(t, f.store, "d0", events.StatusRunning)
	_, err := f.clients[1].Dispatch(t.Context(), parent.Request{
		AgentType: "serial", RunID: "d1", Input: 1, ConcurrencyKey: "chat-1", Strategy: events.StrategyDrop,
	})
	if !errors.Is(err, parent.ErrKeyBusy) {
		t.Fatalf("second drop submit: %v; want ErrKeyBusy", err)
	}
	if r, err := f.clients[0].Inspect(t.Context(), "d1"); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("refused run left a row: %+v %v", r, err)
	}
	close(f.serial.gate("d0"))
	jetruntest.WaitRow(t, f.store, "d0", 30*time.Second, jetruntest.Final)
	close(f.serial.gate("d1"))
	f.submit(t, 1, "d1", events.StrategyDrop, 1)
	if r := jetruntest.WaitRow(t, f.store, "d1", 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
		t.Fatalf("d1 ended %s", r.Status)
	}
}

// Drop under a race: of many drop submits at once from two clients, exactly
// one runs and every other is refused.
func TestKeyDropConcurrentSubmitsAdmitOne(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, false)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = f.clients[i%2].Dispatch(t.Context(), parent.Request{
				AgentType: "serial", RunID: fmt.Sprintf("race%d", i), Input: i, ConcurrencyKey: "chat-1", Strategy: events.StrategyDrop,
			})
		})
	}
	wg.Wait()
	var admitted []string
	for i, err := range errs {
		switch {
		case err == nil:
			admitted = append(admitted, fmt.Sprintf("race%d", i))
		case !errors.Is(err, parent.ErrKeyBusy):
			t.Fatalf("race%d: %v", i, err)
		}
	}
	if len(admitted) != 1 {
		t.Fatalf("admitted %v; want exactly one", admitted)
	}
	waitStatus(t, f.store, admitted[0], events.StatusRunning)
	close(f.serial.gate(admitted[0]))
	jetruntest.WaitRow(t, f.store, admitted[0], 30*time.Second, jetruntest.Final)
}

// Debounce: of a burst of submits only the last runs, after its quiet
// window; the others end superseded.
func TestKeyDebounceRunsTheLastOfABurst(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, true)
	ids := []string{"b0", "b1", "b2", "b3"}
	for i, id := range ids {
		d, err := f.clients[i%2].Dispatch(t.Context(), parent.Request{
			AgentType: "serial", RunID: id, Input: i, ConcurrencyKey: "chat-1",
			Strategy: events.StrategyDebounce, Debounce: 3 * time.Second,
		})
		var row *jetruntype.Run
		if d != nil {
			row = d.Run
		}
		if err != nil || row.Status != events.StatusQueued || row.NotBefore.IsZero() {
			t.Fatalf("%s: %+v %v; want queued with a quiet window", id, row, err)
		}
	}
	if r := jetruntest.WaitRow(t, f.store, "b3", 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
		t.Fatalf("b3 ended %s", r.Status)
	}
	for _, id := range ids[:3] {
		r := jetruntest.WaitRow(t, f.store, id, 30*time.Second, jetruntest.Final)
		if r.Status != events.StatusAborted || r.Reason != events.ReasonSuperseded {
			t.Fatalf("%s: %s/%s; want aborted/superseded", id, r.Status, r.Reason)
		}
	}
	if started, _ := f.serial.snapshot(); !slices.Equal(started, []string{"b3"}) {
		t.Fatalf("started %v; want only b3", started)
	}
}

// Merge: the runs queued behind a live one collapse into one run whose
// input lists theirs, oldest first; the others end merged into it.
func TestKeyMergeCollapsesQueuedRuns(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, false)
	f.submit(t, 0, "m0", events.StrategyMerge, "hello")
	waitStatus(t, f.store, "m0", events.StatusRunning)
	for i, id := range []string{"m1", "m2", "m3"} {
		f.submit(t, i+1, id, events.StrategyMerge, fmt.Sprintf("msg %d", i+1))
	}
	close(f.serial.gate("m0"))
	close(f.serial.gate("m1"))
	if r := jetruntest.WaitRow(t, f.store, "m1", 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted ||
		!slices.Equal(r.Merged, []string{"m2", "m3"}) {
		t.Fatalf("m1: %s, merged %v", r.Status, r.Merged)
	}
	for _, id := range []string{"m2", "m3"} {
		r := jetruntest.WaitRow(t, f.store, id, 30*time.Second, jetruntest.Final)
		if r.Status != events.StatusAborted || r.Reason != events.ReasonMerged || r.MergedInto != "m1" {
			t.Fatalf("%s: %s/%s into %q; want aborted/merged into m1", id, r.Status, r.Reason, r.MergedInto)
		}
	}
	var first, merged []string
	if err := json.Unmarshal(f.serial.input("m0"), &first); err != nil || !slices.Equal(first, []string{"hello"}) {
		t.Fatalf("m0 input %s", f.serial.input("m0"))
	}
	if err := json.Unmarshal(f.serial.input("m1"), &merged); err != nil || !slices.Equal(merged, []string{"msg 1", "msg 2", "msg 3"}) {
		t.Fatalf("m1 input %s", f.serial.input("m1"))
	}
	if started, maxLive := f.serial.snapshot(); !slices.Equal(started, []string{"m0", "m1"}) || maxLive != 1 {
		t.Fatalf("started %v, at most %d at once", started, maxLive)
	}
}

// Cancel of a queued run aborts it at once; the queue goes on past it.
func TestKeyCancelQueuedRun(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, false)
	f.submit(t, 0, "c0", events.StrategyQueue, 0)
	waitStatus(t, f.store, "c0", events.StatusRunning)
	f.submit(t, 1, "c1", events.StrategyQueue, 1)
	f.submit(t, 0, "c2", events.StrategyQueue, 2)
	row, err := f.clients[1].Cancel(t.Context(), "c1", "changed my mind")
	if err != nil || row.Status != events.StatusAborted {
		t.Fatalf("cancel queued: %+v %v", row, err)
	}
	close(f.serial.gate("c0"))
	close(f.serial.gate("c2"))
	if r := jetruntest.WaitRow(t, f.store, "c2", 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
		t.Fatalf("c2 ended %s", r.Status)
	}
	if started, _ := f.serial.snapshot(); !slices.Equal(started, []string{"c0", "c2"}) {
		t.Fatalf("started %v", started)
	}
}

// A plain NATS dispatch carries the key and strategy in its JSON: queued
// ones run in order, a refused drop is dead-lettered with the reason.
func TestKeyPlainNATSDispatch(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, false)
	ctx := t.Context()
	pub := func(id, strategy string) {
		t.Helper()
		body := fmt.Sprintf(`{"runId":%q,"input":{"text":%q},"concurrencyKey":"chat-9","strategy":%q}`, id, id, strategy)
		if _, err := f.js.Publish(ctx, "jetrun.dispatch.serial", []byte(body), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	pub("p0", "queue")
	waitStatus(t, f.store, "p0", events.StatusRunning)
	pub("p1", "queue")
	waitStatus(t, f.store, "p1", events.StatusQueued)
	pub("p2", "drop")

	dlq, err := f.js.Stream(ctx, "JETRUN_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	var reason string
	natstest.Eventually(t, 30*time.Second, func() bool {
		m, err := dlq.GetLastMsgForSubject(ctx, "jetrun.dlq.serial")
		if err != nil {
			return false
		}
		reason = m.Header.Get(events.HeaderReason)
		return true
	}, "the refused drop dispatch is dead-lettered")
	if !strings.Contains(reason, "busy") || !strings.Contains(reason, "chat-9") {
		t.Fatalf("DLQ reason %q", reason)
	}
	close(f.serial.gate("p0"))
	close(f.serial.gate("p1"))
	for _, id := range []string{"p0", "p1"} {
		if r := jetruntest.WaitRow(t, f.store, id, 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
			t.Fatalf("%s ended %s", id, r.Status)
		}
	}
	if started, maxLive := f.serial.snapshot(); !slices.Equal(started, []string{"p0", "p1"}) || maxLive != 1 {
		t.Fatalf("started %v, at most %d at once", started, maxLive)
	}
}

// The reconciler moves a key on whose holder ended without handing it on
// (its worker died between the final write and the hand-off).
func TestReconcilerRepairsAKeyWhoseHolderDied(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv)
	ctx := t.Context()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	c, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	store := engine.From(rt).Store()
	// No worker serves "orphan": h0 holds the key, h1 waits.
	for _, id := range []string{"h0", "h1"} {
		if _, err := c.Dispatch(ctx, parent.Request{AgentType: "orphan", RunID: id, Input: 1, ConcurrencyKey: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := c.Inspect(ctx, "h1"); r.Status != events.StatusQueued {
		t.Fatalf("h1: %s", r.Status)
	}
	// h0 ends the way a worker ends it, and nobody hands the key on.
	if _, _, err := store.Mutate(ctx, "h0", model.Mutation(time.Now(), model.Ended{Status: events.StatusCompleted})); err != nil {
		t.Fatal(err)
	}
	rec, err := reconcile.New(engine.From(rt), reconcile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Stop() })
	if _, err := rec.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := store.Get(ctx, "h1"); r.Status != events.StatusStarting || r.DispatchSeq == 0 {
		t.Fatalf("h1 after the sweep: %s (dispatch %d); want starting with its dispatch out", r.Status, r.DispatchSeq)
	}
	if holder, _, _ := store.Keys().Holder(ctx, "k"); holder != "h1" {
		t.Fatalf("holder %q", holder)
	}
}

// Retrying an interrupted keyed run (its child stopped) queues it behind
// the run that holds the key now, instead of starting it alongside.
func TestKeyRetryOfAnInterruptedRunWaitsForTheKey(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv)
	ctx := t.Context()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	c, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	store := engine.From(rt).Store()
	// No worker serves "orphan", so rows move only as this test moves them.
	dispatch := func(id string) *jetruntype.Run {
		t.Helper()
		d, err := c.Dispatch(ctx, parent.Request{AgentType: "orphan", RunID: id, Input: 1, ConcurrencyKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		return d.Run
	}
	if r := dispatch("i0"); r.Status != events.StatusStarting {
		t.Fatalf("i0: %s", r.Status)
	}
	// i0 is given up with its child stopped: the key is free, i1 takes it.
	if _, _, err := store.Mutate(ctx, "i0", model.Mutation(time.Now(), model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over budget"})); err != nil {
		t.Fatal(err)
	}
	if r := dispatch("i1"); r.Status != events.StatusStarting {
		t.Fatalf("i1: %s; want starting, the key being free", r.Status)
	}
	// Retrying i0 queues it behind i1.
	if r := dispatch("i0"); r.Status != events.StatusQueued || r.Handoffs != 0 {
		t.Fatalf("retried i0: %s (handoffs %d); want queued behind i1, no attempt handed off (none ran)", r.Status, r.Handoffs)
	}
	if _, _, err := store.Mutate(ctx, "i1", model.Mutation(time.Now(), model.Ended{Status: events.StatusCompleted})); err != nil {
		t.Fatal(err)
	}
	if err := keys.Advance(ctx, engine.From(rt), "k", keys.Held{}); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := store.Get(ctx, "i0"); r.Status != events.StatusStarting || r.DispatchSeq == 0 {
		t.Fatalf("i0 after i1 ended: %s (dispatch %d)", r.Status, r.DispatchSeq)
	}
}

// A queued run whose submitter died before entering it in the key's queue
// is entered, and started, by the reconciler.
func TestReconcilerEntersAQueuedRunMissingFromItsQueue(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv)
	ctx := t.Context()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	_, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	store := engine.From(rt).Store()
	row := model.NewRun("orphan", events.Dispatch{RunID: "lost", Input: json.RawMessage(`1`), ConcurrencyKey: "k2"}, 0, time.Now())
	row.Status = events.StatusQueued
	if _, err := store.Create(ctx, row); err != nil { // and the submitter dies here
		t.Fatal(err)
	}
	rec, err := reconcile.New(engine.From(rt), reconcile.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Stop() })
	if _, err := rec.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := store.Get(ctx, "lost"); r.Status != events.StatusStarting || r.DispatchSeq == 0 {
		t.Fatalf("after the sweep: %s (dispatch %d)", r.Status, r.DispatchSeq)
	}
}

// Plain NATS debounce: the worker that receives each dispatch submits it
// and holds it back until its quiet window ends; only the last of the
// burst runs, the others end superseded.
func TestKeyPlainNATSDebounce(t *testing.T) {
	t.Parallel()
	f := setupKeyed(t, true)
	ctx := t.Context()
	ids := []string{"pd0", "pd1", "pd2"}
	publish := func(id string) {
		body := fmt.Sprintf(`{"runId":%q,"input":%q,"concurrencyKey":"chat-5","strategy":"debounce","debounceMs":3000}`, id, id)
		if _, err := f.js.Publish(ctx, "jetrun.dispatch.serial", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	// Two workers admit the dispatches in parallel, in whatever order they
	// get to them; the dispatch sequence, not that order, says which is
	// newest (keys.Submit), so pd2 wins however they arrive.
	for _, id := range ids {
		publish(id)
	}
	if r := jetruntest.WaitRow(t, f.store, "pd2", 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
		t.Fatalf("pd2 ended %s", r.Status)
	}
	for _, id := range ids[:2] {
		r := jetruntest.WaitRow(t, f.store, id, 30*time.Second, jetruntest.Final)
		if r.Status != events.StatusAborted || r.Reason != events.ReasonSuperseded {
			t.Fatalf("%s: %s/%s; want aborted/superseded", id, r.Status, r.Reason)
		}
	}
	if started, _ := f.serial.snapshot(); !slices.Equal(started, []string{"pd2"}) {
		t.Fatalf("started %v; want only pd2", started)
	}
}

// Cancelling a keyed run that holds its key before any worker ran it
// hands the key on at once.
func TestKeyCancelOfAStartingHolderHandsTheKeyOn(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv)
	ctx := t.Context()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	c, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s0", "s1"} {
		if _, err := c.Dispatch(ctx, parent.Request{AgentType: "orphan", RunID: id, Input: 1, ConcurrencyKey: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := c.Cancel(ctx, "s0", "not needed"); err != nil || r.Status != events.StatusAborted {
		t.Fatalf("cancel s0: %+v %v", r, err)
	}
	if r, _ := c.Inspect(ctx, "s1"); r.Status != events.StatusStarting {
		t.Fatalf("s1 after s0 was cancelled: %s; want starting", r.Status)
	}
}
