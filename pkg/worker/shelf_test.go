package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// ackLog records the acknowledgements sent for the dispatches of one
// agent type (InProgress, refusals, acks), as the server receives them.
type ackLog struct {
	mu     sync.Mutex
	bodies []string
}

func (l *ackLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bodies...)
}

func followAcks(t *testing.T, nc *nats.Conn, agentType string) *ackLog {
	t.Helper()
	l := &ackLog{}
	sub, err := nc.Subscribe("$JS.ACK.JETRUN_DISPATCH."+wire.AgentConsumer(agentType)+".>", func(m *nats.Msg) {
		l.mu.Lock()
		l.bodies = append(l.bodies, string(m.Data))
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

// A run waiting for a signal costs no message while it waits: once it has
// waited a beat its dispatch is shelved (its entry written, the delivery
// refused with a long delay, so it stays pending) and is then sent nothing
// for three leases, where every renewal of the worker's key used to carry
// an InProgress for it. The signal still resumes it; its end acknowledges
// the dispatch and removes the entry.
func TestAWaitingRunsDispatchIsSentNothingWhileItWaits(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	acks := followAcks(t, nc, "waits")
	b := &bundle{nc: nc, js: js}
	startWorker(t, nc, worker.Config{ID: "shelver", Lease: lease}, map[string]worker.Handler{
		"waits": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if _, err := run.Wait(ctx, "go"); err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: "resumed"}, nil
		}),
	})
	c := newClient(t, b)
	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.store = store
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	active, err := js.KeyValue(ctx, wire.Namespace("").ActiveBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "waits", RunID: "w", Input: 1}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		_, err := active.Get(ctx, "shelf.shelver.w")
		return err == nil
	}, "the waiting run's dispatch was not shelved")
	natstest.Eventually(t, 10*time.Second, func() bool {
		got := acks.snapshot()
		return len(got) > 0 && strings.HasPrefix(got[len(got)-1], "-NAK")
	}, "no delayed refusal after the shelf entry: %q", acks.snapshot())
	shelved := len(acks.snapshot())

	// Three leases, counted as renewals of the worker's liveness key.
	renewals, err := active.Watch(ctx, "worker.shelver", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = renewals.Stop() }()
	for n := 0; n < 9; {
		select {
		case en := <-renewals.Updates():
			if en != nil && en.Operation() == jetstream.KeyValuePut {
				n++
			}
		case <-ctx.Done():
			t.Fatal("the worker did not renew its liveness key")
		}
	}
	row, _, err := b.store.Get(ctx, "w")
	if got := acks.snapshot(); len(got) != shelved {
		t.Fatalf("the shelved dispatch was sent %q over three leases; want nothing (row: attempt %d, blinks %v)",
			got[shelved:], row.Attempt, row.Blinks)
	}
	if err != nil || row.WaitingFor != "go" || row.Attempt != 1 {
		t.Fatalf("row %+v (%v): want attempt 1 waiting for go", row, err)
	}

	if _, err := c.Signal(ctx, "w", "go", 1); err != nil {
		t.Fatal(err)
	}
	row = jetruntest.WaitRow(t, b.store, "w", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Summary != "resumed" || row.Attempt != 1 {
		t.Fatalf("%s %q attempt %d; want completed, resumed, attempt 1", row.Status, row.Summary, row.Attempt)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		got := acks.snapshot()
		return len(got) > shelved && got[len(got)-1] == "+ACK"
	}, "the ended run's dispatch was not acknowledged: %q", acks.snapshot())
	natstest.Eventually(t, 10*time.Second, func() bool {
		_, err := active.Get(ctx, "shelf.shelver.w")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, "the ended run's shelf entry is still there")
	jetruntest.WaitRow(t, b.store, "w", time.Second, func(r *model.Row) bool { return r.Status.Final() })
}

// A shelved run whose dispatch is redelivered to its worker (a beat that
// came late, a refusal of another worker) keeps the entry written for its
// first delivery: the worker refuses the redelivery with the same delay
// and writes nothing. That entry still brings the dispatch back when the
// worker is gone, even once the consumer's acknowledgement floor moved
// (an earlier run ended and its dispatch was acknowledged): the server
// takes a refusal through any delivery of a message still pending, as it
// keeps the first delivery's sequence for it. The takeover of shelved runs
// (docs/leases.md) relies on this.
func TestARedeliveredShelvedDispatchIsRefusedThroughItsEntry(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The server's refusals it accepted, by stream sequence.
	var (
		mu    sync.Mutex
		naked = map[uint64]int{}
	)
	adv, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.JETRUN_DISPATCH."+wire.AgentConsumer("waits"), func(m *nats.Msg) {
		var a struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		if json.Unmarshal(m.Data, &a) == nil {
			mu.Lock()
			naked[a.StreamSeq]++
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = adv.Unsubscribe() }()
	nakedCount := func(seq uint64) int {
		mu.Lock()
		defer mu.Unlock()
		return naked[seq]
	}
	acks := followAcks(t, nc, "waits")
	b := &bundle{nc: nc, js: js}
	startWorker(t, nc, worker.Config{ID: "shelver", Lease: lease}, map[string]worker.Handler{
		"waits": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if _, err := run.Wait(ctx, "go"); err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: "resumed"}, nil
		}),
	})
	c := newClient(t, b)
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	active, err := js.KeyValue(ctx, wire.Namespace("").ActiveBucket())
	if err != nil {
		t.Fatal(err)
	}
	entry := func(id string) (reply string, ok bool) {
		en, err := active.Get(ctx, "shelf.shelver."+id)
		if err != nil {
			return "", false
		}
		var v struct {
			Reply string `json:"reply"`
		}
		return v.Reply, json.Unmarshal(en.Value(), &v) == nil && v.Reply != ""
	}
	for _, id := range []string{"first", "w"} {
		if _, err := c.Dispatch(ctx, parent.Request{AgentType: "waits", RunID: id, Input: 1}); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 30*time.Second, func() bool { _, ok := entry(id); return ok },
			"run %s was not shelved", id)
	}
	first, _ := entry("w")
	seq, delivered := ackTokens(t, first)
	if delivered != 1 {
		t.Fatalf("shelf entry names delivery %d (%s); want the first", delivered, first)
	}

	// The dispatch comes back to its worker, which shelves it again.
	if err := nc.Publish(first, []byte("-NAK")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		for _, a := range acks.snapshot() {
			if strings.HasPrefix(a, "-NAK {") && nakedCount(seq) >= 3 {
				return true // the shelving refusal, ours, the redelivery's
			}
		}
		return false
	}, "the redelivered dispatch was not shelved again: %q", acks.snapshot())

	// An earlier run ends: its dispatch is acknowledged, and the
	// consumer's acknowledgement floor passes the first delivery of w.
	if _, err := c.Signal(ctx, "first", "go", 1); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, store, "first", 30*time.Second, jetruntest.Final)
	natstest.Eventually(t, 10*time.Second, func() bool {
		got := acks.snapshot()
		return len(got) > 0 && got[len(got)-1] == "+ACK"
	}, "the ended run's dispatch was not acknowledged: %q", acks.snapshot())

	// What another worker does when this one is gone: refuse the delivery
	// the entry names. The server takes it.
	reply, ok := entry("w")
	if !ok {
		t.Fatal("the waiting run's shelf entry is gone")
	}
	if reply != first {
		t.Errorf("shelf entry names %s after the redelivery; want the first delivery's %s, unchanged", reply, first)
	}
	before := nakedCount(seq)
	if err := settle.Retry(0).ApplyReply(nc, reply); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return nakedCount(seq) > before },
		"the server ignored the refusal through the shelf entry (%s): the run would stay pending for the shelf delay", reply)

	if _, err := c.Signal(ctx, "w", "go", 1); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "w", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 1 {
		t.Fatalf("%s attempt %d; want completed, attempt 1", row.Status, row.Attempt)
	}
}

// ackTokens returns the stream sequence and the delivery count an
// acknowledgement subject names.
func ackTokens(t *testing.T, reply string) (seq, delivered uint64) {
	t.Helper()
	tok := strings.Split(reply, ".")
	if len(tok) != 9 {
		t.Fatalf("acknowledgement subject %q: want 9 tokens", reply)
	}
	d, err1 := strconv.ParseUint(tok[4], 10, 64)
	s, err2 := strconv.ParseUint(tok[5], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("acknowledgement subject %q: %v %v", reply, err1, err2)
	}
	return s, d
}
