package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
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
