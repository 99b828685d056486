package meter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/meter"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ledger records hook calls.
type ledger struct {
	mu       sync.Mutex
	starts   []meter.Usage
	finishes []meter.Usage
	calls    map[string]int // per key, hook calls (failed ones included)
}

func (l *ledger) hook(list *[]meter.Usage, failOnce string) meter.Hook {
	return func(ctx context.Context, u meter.Usage) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.calls[u.Key()]++
		if u.RunID == failOnce && l.calls[u.Key()] == 1 {
			return errors.New("the billing system is down")
		}
		*list = append(*list, u)
		return nil
	}
}

func (l *ledger) of(list *[]meter.Usage, id string) []meter.Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []meter.Usage
	for _, u := range *list {
		if u.RunID == id {
			out = append(out, u)
		}
	}
	return out
}

// Every run is metered once per start and once per finish, whoever ended
// it: awaited, detached, cancelled before it started, cleared while live.
// A hook that fails is called again.
func TestEveryRunIsMeteredOncePerStartAndFinish(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	obsSub, err := nc.SubscribeSync("jetrun.obs.run.>")
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{calls: map[string]int{}}
	m, err := meter.New(rt, meter.Config{
		OnStart: l.hook(&l.starts, ""), OnFinish: l.hook(&l.finishes, "m-ok"), RetryDelay: 50 * time.Millisecond,
		Logger: slog.New(obs.NewHandler(slog.DiscardHandler, nc, "", "test")),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })

	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
		w.HandleFunc("waits", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		})
	})
	c, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}

	// Awaited, completed.
	if _, err := c.Run(ctx, parent.Request{AgentType: demo.AgentType, RunID: "m-ok", Input: map[string]int{"steps": 2, "stepMs": 10}}); err != nil {
		t.Fatal(err)
	}
	// Detached, nested, failed.
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: demo.AgentType, RunID: "m-child", Parent: "boss", Depth: 1,
		Input: map[string]int{"steps": 1, "stepMs": 0, "failAt": 1}, Detached: &events.Detached{}}); err != nil {
		t.Fatal(err)
	}
	// Cancelled before any worker took it.
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "nobody", RunID: "m-never", Input: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "m-never", "not needed"); err != nil {
		t.Fatal(err)
	}
	// Cleared while running: its aborted finish is metered before the
	// clear erases its events.
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "waits", RunID: "m-cleared", Input: 1}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return len(l.of(&l.starts, "m-cleared")) == 1 }, "m-cleared never started")
	if n, err := c.Clear(ctx, parent.ClearFilter{Statuses: []events.Status{events.StatusRunning}}); err != nil || n != 1 {
		t.Fatalf("clear: %d %v", n, err)
	}
	if got := l.of(&l.finishes, "m-cleared"); len(got) != 1 || got[0].Status != events.StatusAborted {
		t.Fatalf("m-cleared finishes when the clear returned: %+v", got)
	}

	want := map[string]struct {
		status events.Status
		starts int
		parent string
	}{
		"m-ok":      {events.StatusCompleted, 1, ""},
		"m-child":   {events.StatusError, 1, "boss"},
		"m-never":   {events.StatusAborted, 0, ""},
		"m-cleared": {events.StatusAborted, 1, ""},
	}
	for id := range want {
		natstest.Eventually(t, 30*time.Second, func() bool { return len(l.of(&l.finishes, id)) >= 1 }, "%s: no finish metered", id)
	}
	// Obs events: one started per start, one finished per finish.
	obsSeen := map[string]int{}
	for n := 0; n < 7; {
		msg, err := obsSub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("obs event %d: %v (seen %v)", n, err, obsSeen)
		}
		var ev obs.Event
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Event != obs.RunStarted && ev.Event != obs.RunFinished {
			continue
		}
		n++
		obsSeen[ev.Event+" "+ev.RunID]++
		if wt, ok := want[ev.RunID]; ok && (ev.Attrs["parent"] != wt.parent || ev.Attrs["status"] == nil) {
			t.Errorf("%s: %+v", msg.Subject, ev)
		}
	}
	for id, wt := range want {
		starts, finishes := l.of(&l.starts, id), l.of(&l.finishes, id)
		if len(starts) != wt.starts || len(finishes) != 1 {
			t.Errorf("%s: %d starts, %d finishes: %+v %+v", id, len(starts), len(finishes), starts, finishes)
			continue
		}
		f := finishes[0]
		if f.Status != wt.status || f.Parent != wt.parent || f.Seq == 0 ||
			(wt.starts > 0) != !f.StartedAt.IsZero() || f.Duration < 0 {
			t.Errorf("%s: finish %+v", id, f)
		}
		if wt.starts > 0 && (starts[0].Attempt != 1 || starts[0].Status != events.StatusRunning || starts[0].AgentType == "") {
			t.Errorf("%s: start %+v", id, starts[0])
		}
		if obsSeen[obs.RunFinished+" "+id] != 1 || obsSeen[obs.RunStarted+" "+id] != wt.starts {
			t.Errorf("%s: obs events %v", id, obsSeen)
		}
	}
	l.mu.Lock()
	retried := l.calls[fmt.Sprintf("m-ok.1.%s", events.StatusCompleted)]
	l.mu.Unlock()
	if retried != 2 {
		t.Errorf("the failing hook was called %d times, want 2", retried)
	}
}

// restores counts the consumers a meter restored, by reason.
type restores struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *restores) ConsumerRestored(_, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[reason]++
}

func (r *restores) of(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

// Someone who may create consumers deletes the meter's consumer over and
// over, or re-points it at a subject nothing uses: the meter restores it
// each time, says so, and every run's finish is still metered (a restored
// consumer resumes where its predecessor had got to, not "deliver new").
func TestMeterRestoresItsConsumerAndSkipsNoFinish(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	l := &ledger{calls: map[string]int{}}
	r := &restores{n: map[string]int{}}
	m, err := meter.New(rt, meter.Config{OnFinish: l.hook(&l.finishes, ""), Observer: r})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })

	stream := wire.Namespace(rt.Namespace()).EventsStream()
	const n = 300
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("mr-%03d", i)
			data, _ := json.Marshal(events.StatusEvent{RunID: id, Status: events.StatusCompleted, At: time.Now()})
			if _, err := js.Publish(ctx, rt.Namespace().RunSubject(id, events.KindStatus), data); err != nil {
				t.Fatal(err)
			}
		}
	}
	restored := func(reason string, was int) {
		natstest.Eventually(t, 30*time.Second, func() bool { return r.of(reason) > was }, "the meter did not restore its consumer (%s)", reason)
	}
	for round := range 5 {
		base := round * n / 5
		publish(base, base+n/10)
		// Deleted, while events arrive.
		was := r.of("missing")
		if err := js.DeleteConsumer(ctx, stream, wire.MeterConsumer); err != nil {
			t.Fatal(err)
		}
		publish(base+n/10, base+n/10+n/20)
		restored("missing", was)
		// Re-pointed at a subject nothing uses, while events arrive.
		c, err := js.Consumer(ctx, stream, wire.MeterConsumer)
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.CachedInfo().Config
		cfg.FilterSubject = "jetrun.run.nothing.status"
		was = r.of("drifted")
		// (Right after a consumer is re-created the server may answer an
		// update with a transient error: try again.)
		natstest.Eventually(t, 10*time.Second, func() bool {
			_, err := js.UpdateConsumer(ctx, stream, cfg)
			return err == nil
		}, "re-point the meter's consumer")
		publish(base+n/10+n/20, base+n/5)
		restored("drifted", was)
	}
	for i := range n {
		id := fmt.Sprintf("mr-%03d", i)
		natstest.Eventually(t, 60*time.Second, func() bool { return len(l.of(&l.finishes, id)) >= 1 },
			"%s: its finish was never metered (restored: %d missing, %d drifted)", id, r.of("missing"), r.of("drifted"))
	}
	if r.of("missing") == 0 || r.of("drifted") == 0 {
		t.Fatalf("restores: %d missing, %d drifted", r.of("missing"), r.of("drifted"))
	}
	c, err := js.Consumer(ctx, stream, wire.MeterConsumer)
	if err != nil || c.CachedInfo().Config.FilterSubject != wire.Namespace(rt.Namespace()).StatusWildcard() {
		t.Fatalf("the meter's consumer was not restored: %v", err)
	}
}

// A meter starts after its consumer was deleted and restored: the restored
// consumer resumes where its predecessor had got to (deliver by start
// sequence), a setting the server refuses to change, so a meter that
// started later (a parent-worker restarted after the restore) failed to
// create it ("deliver policy can not be updated") and never started. It
// adopts the consumer as restored and meters what comes next.
func TestAMeterStartsAfterItsConsumerWasRestored(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := &ledger{calls: map[string]int{}}
	r := &restores{n: map[string]int{}}
	first, err := meter.New(rt, meter.Config{OnFinish: l.hook(&l.finishes, ""), Observer: r})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stream := wire.Namespace(rt.Namespace()).EventsStream()
	finished := func(id string) {
		t.Helper()
		data, _ := json.Marshal(events.StatusEvent{RunID: id, Status: events.StatusCompleted, At: time.Now()})
		if _, err := js.Publish(ctx, rt.Namespace().RunSubject(id, events.KindStatus), data); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 30*time.Second, func() bool { return len(l.of(&l.finishes, id)) == 1 }, "%s was not metered", id)
	}
	finished("before")
	if err := js.DeleteConsumer(ctx, stream, wire.MeterConsumer); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return r.of("missing") == 1 }, "the meter did not restore its consumer")
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	second, err := meter.New(rt, meter.Config{OnFinish: l.hook(&l.finishes, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(ctx); err != nil {
		t.Fatalf("a meter started after its consumer was restored: %v", err)
	}
	t.Cleanup(func() { _ = second.Stop() })
	finished("after")
}
