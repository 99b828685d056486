package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store *runstore.Store
}

// setup starts a server and a worker serving demo plus any extra handlers.
func setup(t *testing.T, cfg worker.Config, extra map[string]worker.Handler) (*bundle, *worker.Worker) {
	t.Helper()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	w := startWorker(t, nc, cfg, extra)
	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{nc: nc, js: js, store: store}, w
}

func startWorker(t *testing.T, nc *nats.Conn, cfg worker.Config, extra map[string]worker.Handler) *worker.Worker {
	t.Helper()
	return startWorkerOn(t, jetruntest.OpenRuntime(t, nc, jetrun.Config{}), cfg, extra)
}

// startWorkerOn is startWorker on a runtime of the test's choosing.
func startWorkerOn(t *testing.T, rt *jetrun.Runtime, cfg worker.Config, extra map[string]worker.Handler) *worker.Worker {
	t.Helper()
	w := jetruntest.StartWorker(t, rt, cfg, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
		for name, h := range extra {
			w.Handle(name, h)
		}
	})
	// A failed stop fails the test: this cleanup runs before the kit's own
	// Stop, which ignores the error (a second Stop only repeats it).
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	return w
}

// publish sends a raw dispatch the way a non-jetrun service would.
func publish(t *testing.T, js jetstream.JetStream, subject, payload string, opts ...jetstream.PublishOpt) {
	t.Helper()
	if _, err := js.Publish(context.Background(), subject, []byte(payload), opts...); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

func TestPlainPublishedDispatchCompletes(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, nil)

	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"r1","input":{"steps":5,"stepMs":100}}`)

	row := jetruntest.WaitRow(t, b.store, "r1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("status = %s (%s), want completed", row.Status, row.Error)
	}
	if row.Attempt != 1 || row.Summary != "finished 5 steps" || row.Milestones != 5 || row.Chunks != 5 {
		t.Fatalf("row = %+v", row)
	}
	var out demo.Output
	if err := json.Unmarshal(row.Output, &out); err != nil || out.Steps != 5 {
		t.Fatalf("output = %s (%v)", row.Output, err)
	}

	evs := waitForStatus(t, b.js, "r1", events.StatusCompleted)
	if got := jetruntest.Statuses(evs); !slices.Equal(got, []events.Status{events.StatusRunning, events.StatusCompleted}) {
		t.Fatalf("statuses = %v, want [running completed]", got)
	}
	if got := jetruntest.ChunkSeqs(evs); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("chunk seqs = %v", got)
	}
	if seqs := jetruntest.MilestoneSeqs(evs); !slices.Equal(seqs, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("milestone sequences = %v", seqs)
	}
	if evs[0].Status == nil || evs[0].Seq != row.FirstEventSeq {
		t.Fatalf("first event %+v, row.firstEventSeq %d", evs[0], row.FirstEventSeq)
	}
	if row.Progress == nil || row.Progress.Fraction != 1 {
		t.Fatalf("progress snapshot = %+v, want fraction 1", row.Progress)
	}
}

// waitForStatus reads the run's events until the last status is want: the
// final status event follows the row's final write.
func waitForStatus(t *testing.T, js jetstream.JetStream, id string, want events.Status) []jetruntest.Event {
	t.Helper()
	var evs []jetruntest.Event
	natstest.Eventually(t, 10*time.Second, func() bool {
		evs = jetruntest.ReadEvents(t, js, id)
		st := jetruntest.Statuses(evs)
		return len(st) > 0 && st[len(st)-1] == want
	}, "run %s never showed status %s", id, want)
	return evs
}
