package jetruntest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// setupTimeout bounds each start-up step of the helpers below.
const setupTimeout = 30 * time.Second

// Env is the bundle most tests start from: an embedded JetStream server, a
// connection to it, the runtime (jetrun's streams and buckets in
// Namespace), the runs store and a parent client. Everything is shut down
// at the test's cleanup.
type Env struct {
	Server    *server.Server
	Conn      *nats.Conn
	JS        jetstream.JetStream
	Namespace events.Namespace
	Runtime   *jetrun.Runtime
	Client    *parent.Client
	Store     *runstore.Store
}

// NewEnv starts an embedded JetStream server (natstest.RunServer), connects
// to it, opens the runtime, which creates the streams and buckets, in the
// default namespace, and a parent client on it.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := OpenRuntime(t, nc, jetrun.Config{})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatalf("jetruntest: parent client: %v", err)
	}
	return &Env{Server: ns, Conn: nc, JS: js, Namespace: rt.Namespace(), Runtime: rt, Client: client, Store: engine.From(rt).Store()}
}

// OpenRuntime opens a runtime on nc with cfg (jetrun.Open), failing the
// test if it cannot.
func OpenRuntime(t testing.TB, nc *nats.Conn, cfg jetrun.Config) *jetrun.Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	rt, err := jetrun.Open(ctx, nc, cfg)
	if err != nil {
		t.Fatalf("jetruntest: open runtime: %v", err)
	}
	return rt
}

// StartWorker starts a worker on the env's runtime: see StartWorker.
func (e *Env) StartWorker(t testing.TB, cfg worker.Config, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	return StartWorker(t, e.Runtime, cfg, register)
}

// StartWorker builds a worker on rt with cfg, lets register add its
// handlers (w.Handle, w.HandleFunc, w.HandleWith), starts it, and stops it
// at the test's cleanup. It fails the test if the worker cannot start.
func StartWorker(t testing.TB, rt *jetrun.Runtime, cfg worker.Config, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	w, err := worker.New(rt, cfg)
	if err != nil {
		t.Fatalf("jetruntest: new worker: %v", err)
	}
	if register != nil {
		register(w)
	}
	// The worker runs until the test's cleanup stops it (the end of Start's
	// context would stop it too).
	if err := w.Start(context.Background()); err != nil {
		t.Fatalf("jetruntest: start worker: %v", err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return w
}
