package worker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A waiting run whose dispatch is shelved keeps its shelf entry when a
// beat chooses it again, as a beat did that looked while the run's first
// shelving was still on its way and shelved once that one had ended (a
// busy host: a slow shelf write). Before, the second shelving wrote the
// entry again and, finding the dispatch shelved already, removed it: the
// dispatch stayed refused for an hour with no entry, so when the worker
// was killed no other worker brought it back (runs left waiting on the
// dead worker in TestKilledChildWorkerWithHundredsOfWaitingRuns).
func TestAShelvedRunShelvedAgainKeepsItsEntry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(rt, Config{ID: "twice", Lease: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("waits", HandlerFunc(func(ctx context.Context, run *Run) (Result, error) {
		if _, err := run.Wait(ctx, "go"); err != nil {
			return Result{}, err
		}
		return Result{Summary: "resumed"}, nil
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(); err != nil {
			t.Error(err)
		}
	}()
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	active, err := js.KeyValue(ctx, wire.Namespace("").ActiveBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "waits", RunID: "w", Input: 1}); err != nil {
		t.Fatal(err)
	}
	var e *execution
	natstest.Eventually(t, 30*time.Second, func() bool {
		w.mu.Lock()
		e = w.active["w"]
		w.mu.Unlock()
		_, err := active.Get(ctx, "shelf.twice.w")
		return e != nil && e.dlv.isShelved() && err == nil
	}, "the waiting run's dispatch was not shelved")

	w.shelve(ctx, []*execution{e})
	if _, err := active.Get(ctx, "shelf.twice.w"); err != nil {
		t.Fatalf("the shelved run's entry after a second shelving: %v; want it kept", err)
	}

	if _, err := client.Signal(ctx, "w", "go", 1); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		row, err := client.Inspect(ctx, "w")
		return err == nil && row.Status == events.StatusCompleted
	}, "the waiting run did not complete once signalled")
	natstest.Eventually(t, 10*time.Second, func() bool {
		_, err := active.Get(ctx, "shelf.twice.w")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, "the ended run's shelf entry is still there")
}

// While a beat's shelving is still on its way (a slow shelf write on a
// busy host), later beats shelve nothing and keep sending InProgress for
// the waiting runs not shelved yet, so their dispatches are not
// redelivered meanwhile; once it is done, they are shelved. Before, such a
// beat chose the runs to shelve, dropped them, and sent them nothing.
func TestWaitingRunsAreBeatenWhileAShelvingIsOnItsWay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	var (
		mu   sync.Mutex
		acks []string
	)
	sub, err := nc.Subscribe("$JS.ACK.JETRUN_DISPATCH."+wire.AgentConsumer("waits")+".>", func(m *nats.Msg) {
		mu.Lock()
		acks = append(acks, string(m.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	snapshot := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(acks)
	}
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(rt, Config{ID: "busy", Lease: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("waits", HandlerFunc(func(ctx context.Context, run *Run) (Result, error) {
		if _, err := run.Wait(ctx, "go"); err != nil {
			return Result{}, err
		}
		return Result{Summary: "resumed"}, nil
	}))
	w.shelving.Store(true) // an earlier beat's shelving, on its way
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(); err != nil {
			t.Error(err)
		}
	}()
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	active, err := js.KeyValue(ctx, wire.Namespace("").ActiveBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "waits", RunID: "w", Input: 1}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		row, err := client.Inspect(ctx, "w")
		return err == nil && row.WaitingFor == "go"
	}, "the run did not wait")

	// Three renewals of the worker's key: each carries an InProgress for
	// the waiting run, which is not shelved.
	renewals, err := active.Watch(ctx, "worker.busy", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = renewals.Stop() }()
	waited := len(snapshot())
	for n := 0; n < 3; {
		select {
		case en := <-renewals.Updates():
			if en != nil && en.Operation() == jetstream.KeyValuePut {
				n++
			}
		case <-ctx.Done():
			t.Fatal("the worker did not renew its liveness key")
		}
	}
	if got := snapshot()[waited:]; len(got) < 2 || slices.ContainsFunc(got, func(a string) bool { return a != "+WPI" }) {
		t.Fatalf("the waiting run's dispatch was sent %q over three renewals while a shelving was on its way; want an InProgress each", got)
	}
	if _, err := active.Get(ctx, "shelf.busy.w"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("shelf entry while a shelving was on its way: %v; want none", err)
	}

	w.shelving.Store(false) // done: the run is shelved at a next beat
	natstest.Eventually(t, 30*time.Second, func() bool {
		_, err := active.Get(ctx, "shelf.busy.w")
		got := snapshot()
		return err == nil && strings.HasPrefix(got[len(got)-1], "-NAK")
	}, "the waiting run was not shelved once the earlier shelving was done: %q", snapshot())
	if _, err := client.Signal(ctx, "w", "go", 1); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		row, err := client.Inspect(ctx, "w")
		return err == nil && row.Status == events.StatusCompleted && row.Attempt == 1
	}, "the waiting run did not complete in its first attempt once signalled")
}
