package natstest

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Outage is a server a test takes down and brings back on the same port and
// store, and a connection to it that reconnects through the outage.
type Outage struct {
	t        testing.TB
	ns       *server.Server
	port     int
	storeDir string
	failed   atomic.Int64
	// Conn reconnects every 20 ms, without limit, while the server is
	// down; it is closed at cleanup.
	Conn *nats.Conn
}

// RunOutage starts a server as RunServer does and connects to it. The
// server, first or brought back, is shut down at the cleanup's place of
// RunOutage's call: after whatever the test started later (a worker that
// stops cleanly while its server still answers).
func RunOutage(t testing.TB) *Outage {
	t.Helper()
	opts := &server.Options{}
	o := &Outage{t: t, ns: startServer(t, opts), storeDir: opts.StoreDir}
	t.Cleanup(o.Stop)
	o.port = o.ns.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(o.ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectErrHandler(func(*nats.Conn, error) { o.failed.Add(1) }))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	o.Conn = nc
	return o
}

// Stop shuts the server down and waits until it is gone.
func (o *Outage) Stop() {
	o.ns.Shutdown()
	o.ns.WaitForShutdown()
}

// Start brings the server back on its port and store.
func (o *Outage) Start() {
	o.t.Helper()
	o.ns = startServer(o.t, &server.Options{Port: o.port, StoreDir: o.storeDir})
}

// FailedReconnects counts the connection's attempts to reach the server
// that failed: while it is down.
func (o *Outage) FailedReconnects() int64 { return o.failed.Load() }
