package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// delivery is one finish handler invocation.
type delivery struct {
	RunID  string
	Status events.Status
	Reason string
	Key    string // finish.IdempotencyKey
	At     time.Time
}

// recorder is a finish handler that records every invocation; fail makes
// it fail (after recording) for the runs it returns true for.
type recorder struct {
	mu   sync.Mutex
	got  []delivery
	fail func(runID string) bool
}

func (r *recorder) ServeFinish(ctx context.Context, run *jetruntype.Run, res finish.Result) error {
	r.mu.Lock()
	r.got = append(r.got, delivery{RunID: res.RunID, Status: res.Status, Reason: res.Reason, Key: finish.IdempotencyKey(res), At: time.Now()})
	r.mu.Unlock()
	if r.fail != nil && r.fail(res.RunID) {
		return errors.New("the downstream system is down")
	}
	return nil
}

func (r *recorder) of(runID string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivery
	for _, d := range r.got {
		if d.RunID == runID {
			out = append(out, d)
		}
	}
	return out
}

func statuses(ds []delivery) string {
	var s []events.Status
	for _, d := range ds {
		s = append(s, d.Status)
	}
	return fmt.Sprint(s)
}

type env struct {
	ns     *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	client *parent.Client
	store  *runstore.Store
	rec    *recorder
	recon  *reconcile.Reconciler
}

type options struct {
	finish      finish.Config
	reconcile   reconcile.Config
	handlers    map[string]worker.Handler
	noReconcile bool
	workerID    string
}

func setup(t *testing.T, o options) *env {
	t.Helper()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx := context.Background()

	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{ID: o.workerID, RowSyncInterval: 100 * time.Millisecond}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
		for name, h := range o.handlers {
			w.Handle(name, h)
		}
	})

	rec := &recorder{}
	fc := o.finish
	fc.Timeout = max(fc.Timeout, 2*time.Second)
	fc.RetryDelay = max(fc.RetryDelay, 50*time.Millisecond)
	d, err := finish.New(rt, fc)
	if err != nil {
		t.Fatal(err)
	}
	d.Handle("record", rec)
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })

	rc := o.reconcile
	rc.Interval = max(rc.Interval, 200*time.Millisecond)
	r, err := reconcile.New(engine.From(rt), rc)
	if err != nil {
		t.Fatal(err)
	}
	r.TestSignals.Init(t)
	if o.noReconcile {
		t.Cleanup(func() { _ = r.Stop() })
	} else {
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop() })
	}

	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{ns: ns, nc: nc, js: js, client: client, store: engine.From(rt).Store(), rec: rec, recon: r}
}

func (e *env) detached(t *testing.T, id, agentType string, input any, det events.Detached) {
	t.Helper()
	det.OnFinish = "record"
	if _, err := e.client.Dispatch(context.Background(), parent.Request{
		AgentType: agentType, RunID: id, Input: input, Detached: &det,
	}); err != nil {
		t.Fatal(err)
	}
}

// givenUp waits until the reconciler gave run id up for a budget (by a
// sweep, or by the check between sweeps).
func givenUp(t *testing.T, e *env, id string) {
	t.Helper()
	e.recon.TestSignals.Acted.WaitFor(func(a reconcile.Acted) bool {
		_, gaveUp := a.Action.(model.GiveUpByBudget)
		return a.RunID == id && gaveUp
	})
}

func waitDeliveries(t *testing.T, r *recorder, id string, n int) []delivery {
	t.Helper()
	natstest.Eventually(t, 30*time.Second, func() bool { return len(r.of(id)) >= n },
		"run %s: %d deliveries, want %d", id, len(r.of(id)), n)
	return r.of(id)
}

func TestDetachedRunsDeliverEachFinishExactlyOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	const n = 20
	for i := range n {
		e.detached(t, fmt.Sprintf("d%02d", i), demo.AgentType, map[string]int{"steps": 2, "stepMs": 20}, events.Detached{})
	}
	for i := range n {
		id := fmt.Sprintf("d%02d", i)
		row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Settled)
		if row.Status != events.StatusCompleted || row.Delivered[events.StatusCompleted].IsZero() {
			t.Fatalf("%s: %+v", id, row)
		}
	}
	// Let the reconciler sweep a few more times: nothing is delivered again.
	sweeps(t, e, 3)
	for i := range n {
		id := fmt.Sprintf("d%02d", i)
		if got := e.rec.of(id); len(got) != 1 || got[0].Status != events.StatusCompleted {
			t.Errorf("%s: deliveries %s, want exactly one completed", id, statuses(got))
		}
	}
}

// sweeps runs n sweeps directly (the timer's sweeps are idempotent with
// them) and returns how many finishes they republished.
func sweeps(t *testing.T, e *env, n int) (republished int) {
	t.Helper()
	for range n {
		st, err := e.recon.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		republished += st.Republished
	}
	return republished
}

func TestBudgetExceededGivesUpDeliversOnceAndStopsTheChild(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	// A 10 s child under a 1.5 s budget.
	e.detached(t, "budget", demo.AgentType, map[string]int{"steps": 20, "stepMs": 500}, events.Detached{MaxBudgetMs: 1500})

	givenUp(t, e, "budget")
	// Its worker stops the child and says so on the row.
	row := jetruntest.WaitRow(t, e.store, "budget", 30*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusInterrupted && !r.ChildStillRunning && r.Worker == ""
	})
	if row.Reason != events.ReasonBudgetExceeded || !row.Retryable {
		t.Fatalf("row = %+v", row)
	}
	waitDeliveries(t, e.rec, "budget", 1)
	sweeps(t, e, 3)
	got := e.rec.of("budget")
	if len(got) != 1 || got[0].Status != events.StatusInterrupted || got[0].Reason != events.ReasonBudgetExceeded {
		t.Fatalf("deliveries %+v: want one interrupted/budget-exceeded (and no aborted from the teardown)", got)
	}
	final, _, _ := e.store.Get(context.Background(), "budget")
	if final.Status != events.StatusInterrupted || final.Milestones >= 20 {
		t.Fatalf("the child was not stopped: %+v", final)
	}
	if _, owed := final.Finishes[events.StatusAborted]; owed {
		t.Fatal("the teardown owes an aborted finish")
	}
	// Given up, child stopped, finish delivered: settled, out of the index.
	active, err := e.store.Index().Active(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ir := range active {
		if ir.ID == "budget" {
			t.Fatal("a settled give-up stays in the active-run index")
		}
	}
	evs := jetruntest.ReadEvents(t, e.js, "budget")
	var st []string
	for _, ev := range evs {
		if ev.Status != nil {
			st = append(st, fmt.Sprintf("%s/%v", ev.Status.Status, ev.Status.ChildStillRunning))
		}
	}
	// The give-up, then the child's stop: no aborted.
	if s := fmt.Sprint(st); s != "[running/false interrupted/true interrupted/false]" {
		t.Fatalf("status events %s", s)
	}
}

// signaller reports progress every period for n periods, or signals once
// and goes silent when n is negative.
func signaller(period time.Duration) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var n int
		if err := json.Unmarshal(run.Input(), &n); err != nil {
			return worker.Result{}, err
		}
		silent := n < 0
		if silent {
			n = 1000
		}
		for i := 1; i <= n; i++ {
			if !silent || i == 1 {
				if err := run.Progress(ctx, worker.Progress{Fraction: float64(i) / float64(n), Message: "tick"}); err != nil {
					return worker.Result{}, err
				}
			}
			select {
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			case <-time.After(period):
			}
		}
		return worker.Result{Summary: "done"}, nil
	})
}

func TestNoProgressBudget(t *testing.T) {
	t.Parallel()
	e := setup(t, options{handlers: map[string]worker.Handler{"signal": signaller(500 * time.Millisecond)}})
	det := events.Detached{NoProgressBudgetMs: 2000}
	e.detached(t, "chatty", "signal", 12, det) // 6 s of signals every 500 ms
	e.detached(t, "silent", "signal", -1, det) // one signal, then silence

	givenUp(t, e, "silent")
	row, _, err := e.store.Get(t.Context(), "silent")
	if err != nil || row.Status != events.StatusInterrupted || row.Reason != events.ReasonNoProgress {
		t.Fatalf("silent: %+v, %v", row, err)
	}
	chatty := jetruntest.WaitRow(t, e.store, "chatty", 30*time.Second, jetruntest.Settled)
	if chatty.Status != events.StatusCompleted || chatty.Finishes[events.StatusInterrupted] != nil {
		t.Fatalf("chatty was given up: %+v", chatty)
	}
	if got := statuses(waitDeliveries(t, e.rec, "chatty", 1)); got != "[completed]" {
		t.Fatalf("chatty deliveries %s", got)
	}
	if got := statuses(waitDeliveries(t, e.rec, "silent", 1)); got != "[interrupted]" {
		t.Fatalf("silent deliveries %s", got)
	}
}

// A run that never signals is bounded only by its absolute budget.
func TestNoProgressIsArmedOnlyByASignal(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	e := setup(t, options{handlers: map[string]worker.Handler{
		"mute": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			select {
			case <-gate:
				return worker.Result{Summary: "spoke at last"}, nil
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		}),
	}})
	e.detached(t, "mute", "mute", 1, events.Detached{NoProgressBudgetMs: 300})
	jetruntest.WaitRow(t, e.store, "mute", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	// The run has been silent for 200 no-progress budgets when it is swept.
	aged := time.Now().Add(-time.Minute)
	if _, _, err := e.store.Mutate(context.Background(), "mute", func(r *model.Row) error {
		r.CreatedAt, r.StartedAt = aged, aged
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sweeps(t, e, 3)
	row, _, _ := e.store.Get(context.Background(), "mute")
	if row.Status != events.StatusRunning {
		t.Fatalf("a run that never signalled was given up: %+v", row)
	}
	close(gate)
	if row := jetruntest.WaitRow(t, e.store, "mute", 10*time.Second, jetruntest.Settled); row.Status != events.StatusCompleted {
		t.Fatalf("row = %+v", row)
	}
}

// Give-up then late completion (the child ignores its teardown): onFinish
// fires twice, interrupted then completed, and the row ends completed.
func TestGiveUpThenLateCompletionDeliversBothInOrder(t *testing.T) {
	t.Parallel()
	gaveUp := make(chan struct{})
	e := setup(t, options{handlers: map[string]worker.Handler{
		"stubborn": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-gaveUp // ignores cancellation; finishes after the give-up was delivered
			return worker.Result{Summary: "finished anyway"}, nil
		}),
	}})
	e.detached(t, "late", "stubborn", 1, events.Detached{MaxBudgetMs: 1000})
	waitDeliveries(t, e.rec, "late", 1)
	close(gaveUp)
	row := jetruntest.WaitRow(t, e.store, "late", 30*time.Second, jetruntest.Settled)
	if row.Status != events.StatusCompleted || row.Summary != "finished anyway" || row.Reason != "" {
		t.Fatalf("row = %+v", row)
	}
	got := waitDeliveries(t, e.rec, "late", 2)
	if s := statuses(got); s != "[interrupted completed]" {
		t.Fatalf("deliveries %s, want [interrupted completed]", s)
	}
	if got[0].Reason != events.ReasonBudgetExceeded {
		t.Fatalf("give-up reason %q", got[0].Reason)
	}
}

func TestAlwaysFailingHandlerIsDeadLetteredAndNotRetried(t *testing.T) {
	t.Parallel()
	e := setup(t, options{finish: finish.Config{MaxAttempts: 3}})
	e.rec.fail = func(string) bool { return true }
	e.detached(t, "doomed", demo.AgentType, map[string]int{"steps": 1, "stepMs": 0}, events.Detached{})

	row := jetruntest.WaitRow(t, e.store, "doomed", 30*time.Second, func(r *model.Row) bool {
		f := r.Finishes[events.StatusCompleted]
		return f != nil && !f.FailedAt.IsZero()
	})
	f := row.Finishes[events.StatusCompleted]
	if f.Attempts != 3 || f.LastError == "" || !row.Delivered[events.StatusCompleted].IsZero() {
		t.Fatalf("ledger = %+v", f)
	}
	ctx := context.Background()
	dlq, err := e.js.Stream(ctx, "JETRUN_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlq.GetLastMsgForSubject(ctx, "jetrun.dlq.finish.record")
	if err != nil {
		t.Fatal(err)
	}
	var res finish.Result
	if err := json.Unmarshal(m.Data, &res); err != nil || res.RunID != "doomed" || m.Header.Get(events.HeaderReason) == "" {
		t.Fatalf("dead letter %s %v: %v", m.Data, m.Header, err)
	}
	// Long overdue as far as the reconciler can tell, the finish is still
	// not retried.
	if _, _, err := e.store.Mutate(ctx, "doomed", func(r *model.Row) error {
		r.Finishes[events.StatusCompleted].DueAt = time.Now().Add(-time.Minute)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := sweeps(t, e, 3); n != 0 {
		t.Fatalf("the reconciler republished a dead-lettered finish %d times", n)
	}
	if n := len(e.rec.of("doomed")); n != 3 {
		t.Fatalf("%d attempts, want exactly 3 (no retries after the dead letter)", n)
	}
}

func TestCancelCascadesToChildrenAndGrandchildren(t *testing.T) {
	t.Parallel()
	wait := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		<-ctx.Done()
		return worker.Result{}, context.Cause(ctx)
	})
	e := setup(t, options{handlers: map[string]worker.Handler{"wait": wait}})
	ctx := context.Background()
	dispatch := func(id, parentID string, depth int) {
		if _, err := e.client.Dispatch(ctx, parent.Request{
			AgentType: "wait", RunID: id, Parent: parentID, Depth: depth, Input: 1,
			Detached: &events.Detached{OnFinish: "record"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	dispatch("top", "", 0)
	dispatch("kid1", "top", 1)
	dispatch("kid2", "top", 1)
	dispatch("grandkid", "kid1", 2)
	dispatch("bystander", "", 0)
	for _, id := range []string{"top", "kid1", "kid2", "grandkid", "bystander"} {
		jetruntest.WaitRow(t, e.store, id, 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	}
	if _, err := e.client.Cancel(ctx, "top", "stop everything"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"top", "kid1", "kid2", "grandkid"} {
		row := jetruntest.WaitRow(t, e.store, id, 10*time.Second, jetruntest.Settled)
		if row.Status != events.StatusAborted {
			t.Fatalf("%s: %s", id, row.Status)
		}
		if got := statuses(waitDeliveries(t, e.rec, id, 1)); got != "[aborted]" {
			t.Fatalf("%s deliveries %s", id, got)
		}
	}
	sweeps(t, e, 2)
	for _, id := range []string{"top", "kid1", "kid2", "grandkid"} {
		if n := len(e.rec.of(id)); n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	if row, _, _ := e.store.Get(ctx, "bystander"); row.Status != events.StatusRunning {
		t.Fatalf("bystander: %s", row.Status)
	}
}

// A cascade cut short (the parent was cancelled but a child was not) is
// completed by the reconciler.
func TestReconcilerCompletesAnInterruptedCascade(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true})
	ctx := context.Background()
	now := time.Now()
	for _, r := range []*model.Row{
		{ID: "p", AgentType: "demo", Status: events.StatusAborted, CancelRequested: true, CreatedAt: now, FinishedAt: now},
		{ID: "c", AgentType: "demo", Parent: "p", Depth: 1, Status: events.StatusRunning, Attempt: 1,
			Worker: "ghost", LeaseUntil: now.Add(time.Hour), CreatedAt: now},
	} {
		if _, err := e.store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.recon.Sweep(ctx)
	if err != nil || st.Cancelled != 1 {
		t.Fatalf("sweep: %+v %v", st, err)
	}
	row, _, _ := e.store.Get(ctx, "c")
	if !row.CancelRequested {
		t.Fatalf("child not cancelled: %+v", row)
	}
}

func TestLostDispatchesAreRecovered(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true, reconcile: reconcile.Config{
		StartingGrace: time.Millisecond, LeaseGrace: time.Millisecond, MaxRedispatches: 1,
	}})
	ctx := context.Background()
	old := time.Now().Add(-time.Minute)
	// A dispatch still queued (no worker serves its type yet) is left alone.
	ack, err := e.js.Publish(ctx, "jetrun.dispatch.nobody", []byte(`{"runId":"queued","input":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*model.Row{
		{ID: "queued", AgentType: "nobody", Status: events.StatusStarting, CreatedAt: old, DispatchSeq: ack.Sequence, Input: []byte(`{}`)},
		// A parent died between creating the row and publishing.
		{ID: "never-sent", AgentType: "demo", Status: events.StatusStarting, CreatedAt: old, Input: []byte(`{"steps":2,"stepMs":0}`)},
		// A worker's lease expired and its dispatch is gone.
		{ID: "abandoned", AgentType: "demo", Status: events.StatusRunning, Attempt: 1, Worker: "ghost",
			LeaseUntil: old, CreatedAt: old, StartedAt: old, Input: []byte(`{"steps":2,"stepMs":0}`)},
		// Re-dispatched too often already.
		{ID: "hopeless", AgentType: "demo", Status: events.StatusRunning, Attempt: 1, Worker: "ghost",
			LeaseUntil: old, CreatedAt: old, Redispatches: 1, DispatchSeq: 999, Input: []byte(`{}`)}, // its dispatch is gone
	} {
		if _, err := e.store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.recon.Sweep(ctx)
	if err != nil || st.Recovered != 2 || st.Failed != 1 {
		t.Fatalf("sweep: %+v %v", st, err)
	}
	if r := jetruntest.WaitRow(t, e.store, "never-sent", 10*time.Second, jetruntest.Final); r.Status != events.StatusCompleted || r.Attempt != 1 {
		t.Fatalf("never-sent: %+v", r)
	}
	if r := jetruntest.WaitRow(t, e.store, "abandoned", 10*time.Second, jetruntest.Final); r.Status != events.StatusCompleted || r.Attempt != 2 {
		t.Fatalf("abandoned: %+v", r)
	}
	if r, _, _ := e.store.Get(ctx, "hopeless"); r.Status != events.StatusError || r.Reason != events.ReasonDispatchLost {
		t.Fatalf("hopeless: %+v", r)
	}
	if r, _, _ := e.store.Get(ctx, "queued"); r.Status != events.StatusStarting || r.Redispatches != 0 {
		t.Fatalf("queued: %+v", r)
	}
}

// Awaited (not detached) runs have no budgets: a parent that went away never
// gets its run sealed.
func TestAwaitedRunsAreNeverGivenUp(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true, reconcile: reconcile.Config{MaxBudget: time.Millisecond, NoProgressBudget: time.Millisecond}})
	ctx := context.Background()
	long := time.Now().Add(-48 * time.Hour)
	if _, err := e.store.Create(ctx, &model.Row{
		ID: "awaited", AgentType: "demo", Status: events.StatusRunning, Attempt: 1, Worker: "alive",
		LeaseUntil: time.Now().Add(time.Hour), CreatedAt: long, StartedAt: long, LastSignalAt: long,
	}); err != nil {
		t.Fatal(err)
	}
	if st, err := e.recon.Sweep(ctx); err != nil || st.GivenUp != 0 {
		t.Fatalf("sweep: %+v %v", st, err)
	}
	if r, _, _ := e.store.Get(ctx, "awaited"); r.Status != events.StatusRunning {
		t.Fatalf("awaited run: %s", r.Status)
	}
}

func TestOneLeaderAtATimeAndAStandbyTakesOver(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	ctx := context.Background()
	_, js := natstest.Connect(t, ns)
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []*reconcile.Reconciler
	for i := range 2 {
		nc, _ := natstest.Connect(t, ns)
		rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
		r, err := reconcile.New(engine.From(rt), reconcile.Config{ID: fmt.Sprintf("r%d", i), Interval: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop() })
		recs = append(recs, r)
	}
	var leader, standby *reconcile.Reconciler
	natstest.Eventually(t, 10*time.Second, func() bool {
		a, b := recs[0].IsLeader(), recs[1].IsLeader()
		if a == b {
			return false
		}
		leader, standby = recs[0], recs[1]
		if b {
			leader, standby = recs[1], recs[0]
		}
		return true
	}, "no single leader")
	// Stay with one leader over a dozen renewals of its lease (it renews
	// every third of an interval), more than a lease's time to live.
	lease := store.Lease("leader")
	last, err := lease.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		natstest.Eventually(t, 10*time.Second, func() bool {
			st, err := lease.State(ctx)
			if err != nil || st.Revision == last.Revision {
				return false
			}
			if st.Holder != last.Holder {
				t.Fatalf("the lease moved from %s to %s while its holder lived", last.Holder, st.Holder)
			}
			last = st
			return true
		}, "the leader stopped renewing its lease")
		if recs[0].IsLeader() && recs[1].IsLeader() {
			t.Fatal("two leaders at once")
		}
	}
	leader.Stop()
	natstest.Eventually(t, 10*time.Second, standby.IsLeader, "the standby never took over")
}

func TestConcurrencyCapPerParent(t *testing.T) {
	t.Parallel()
	gates := map[string]chan struct{}{}
	var mu sync.Mutex
	gate := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if gates[id] == nil {
			gates[id] = make(chan struct{})
		}
		return gates[id]
	}
	e := setup(t, options{handlers: map[string]worker.Handler{
		"gated": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			select {
			case <-gate(run.ID()):
			case <-ctx.Done():
			}
			return worker.Result{}, nil
		}),
	}})
	ctx := context.Background()
	req := func(id string) parent.Request {
		return parent.Request{AgentType: "gated", RunID: id, Parent: "boss", Depth: 1, Input: 1, MaxConcurrent: 2}
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { _, errs[i] = e.client.Dispatch(ctx, req(fmt.Sprintf("cap%d", i))) })
	}
	wg.Wait()
	var rejected []int
	for i, err := range errs {
		if errors.Is(err, parent.ErrConcurrencyLimit) {
			rejected = append(rejected, i)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if len(rejected) != 1 {
		t.Fatalf("rejected %v of 3 concurrent dispatches under a cap of 2, want exactly one (errors %v)", rejected, errs)
	}
	burnt := fmt.Sprintf("cap%d", rejected[0])
	if row, err := e.client.Inspect(ctx, burnt); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("the rejected run id was used: %+v, %v", row, err)
	}
	// A slot frees when a run finishes: the same id now goes through.
	for i := range 3 {
		if id := fmt.Sprintf("cap%d", i); id != burnt {
			close(gate(id))
			jetruntest.WaitRow(t, e.store, id, 10*time.Second, jetruntest.Final)
			break
		}
	}
	if _, err := e.client.Dispatch(ctx, req(burnt)); err != nil {
		t.Fatalf("re-dispatch of the rejected id after a slot freed: %v", err)
	}
}

func TestClearCancelsLiveRunsThenErasesThem(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ctx := context.Background()
	if _, err := e.client.Run(ctx, parent.Request{AgentType: "demo", RunID: "done", Input: map[string]int{"steps": 1, "stepMs": 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: "busy", Input: map[string]int{"steps": 100, "stepMs": 100}}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, e.store, "busy", 10*time.Second, func(r *model.Row) bool { return r.Milestones > 0 })

	if _, err := e.client.Clear(ctx, parent.ClearFilter{}); !errors.Is(err, parent.ErrBadRequest) {
		t.Fatalf("clear without a filter: %v", err)
	}
	n, err := e.client.Clear(ctx, parent.ClearFilter{Statuses: []events.Status{events.StatusRunning, events.StatusCompleted}})
	if err != nil || n != 2 {
		t.Fatalf("clear = %d, %v", n, err)
	}
	for _, id := range []string{"done", "busy"} {
		if ok, _ := jetruntest.HasRun(ctx, e.client, id); ok {
			t.Fatalf("%s still has a row", id)
		}
		if evs := jetruntest.ReadEvents(t, e.js, id); len(evs) != 0 {
			t.Fatalf("%s still has %d events", id, len(evs))
		}
	}
	if active, _ := e.store.Index().Active(ctx); len(active) != 0 {
		t.Fatalf("index still lists %v", active)
	}
}

func TestRetentionClearsOldSettledRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, options{noReconcile: true, reconcile: reconcile.Config{Retention: time.Hour}})
	ctx := context.Background()
	old, recent := time.Now().Add(-2*time.Hour), time.Now()
	for _, r := range []*model.Row{
		{ID: "old", AgentType: "demo", Status: events.StatusCompleted, CreatedAt: old, FinishedAt: old},
		{ID: "recent", AgentType: "demo", Status: events.StatusCompleted, CreatedAt: recent, FinishedAt: recent},
		{ID: "old-live", AgentType: "demo", Status: events.StatusRunning, CreatedAt: old},
	} {
		if _, err := e.store.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	n, err := e.recon.Retain(ctx)
	if err != nil || n != 1 {
		t.Fatalf("retain = %d, %v", n, err)
	}
	for id, want := range map[string]bool{"old": false, "recent": true, "old-live": true} {
		if ok, _ := jetruntest.HasRun(ctx, e.client, id); ok != want {
			t.Errorf("%s exists = %v, want %v", id, ok, want)
		}
	}
}

// sweepSignal is an Observer that says a sweep ended since it was last
// read.
type sweepSignal chan struct{}

func (s sweepSignal) Swept(reconcile.Stats, error) {
	select {
	case s <- struct{}{}:
	default:
	}
}

// Retention zero keeps runs forever, as JETRUN_RETENTION=0 does: a running
// reconciler with retention due after every sweep clears an old final run
// only when Retention is positive.
func TestRetentionZeroKeepsRunsForever(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		kept      bool
	}{
		{"zero", 0, true},
		{"negative", -1, true},
		{"an hour", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			swept := make(sweepSignal, 1)
			e := setup(t, options{reconcile: reconcile.Config{Retention: tc.retention, RetentionEvery: time.Millisecond, Observer: swept}})
			ctx := context.Background()
			old := time.Now().Add(-30 * 24 * time.Hour)
			if _, err := e.store.Create(ctx, &model.Row{ID: "old", AgentType: "demo", Status: events.StatusCompleted, CreatedAt: old, FinishedAt: old}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-swept: // a sweep that may have begun before the row existed
			default:
			}
			// Retention runs after each sweep once RetentionEvery has passed
			// (sweeps are 200ms apart): by the end of the third sweep from
			// here it has run at least once on the row.
			for i := range 3 {
				select {
				case <-swept:
				case <-time.After(30 * time.Second):
					t.Fatalf("sweep %d did not end", i+1)
				}
			}
			if ok, err := jetruntest.HasRun(ctx, e.client, "old"); err != nil || ok != tc.kept {
				t.Fatalf("the old final run exists = %v (%v), want %v", ok, err, tc.kept)
			}
			if tc.kept {
				if n, err := e.recon.Retain(ctx); err != nil || n != 0 {
					t.Fatalf("retain = %d, %v; want nothing cleared", n, err)
				}
			}
		})
	}
}
