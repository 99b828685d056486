package natstest

import (
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Nodes is a JetStream cluster on loopback whose nodes a test stops and
// starts again, each on its own client port, cluster port and store.
// Every node still running is shut down at the test's cleanup.
type Nodes struct {
	t     testing.TB
	mu    sync.Mutex
	opts  []server.Options
	nodes []*server.Server
}

// RunNodes starts a cluster of n nodes (at least three), named r1, r2, …
// and returns it once a three-replica stream can be placed. Under -short
// it skips the test, as RunCluster does.
func RunNodes(t testing.TB, n int) *Nodes {
	t.Helper()
	if testing.Short() {
		t.Skip("natstest: a cluster test, skipped under -short (make test-short); make test runs it")
	}
	c := &Nodes{t: t, nodes: make([]*server.Server, n)}
	var routes []*url.URL
	cports := make([]int, n)
	for i := range cports {
		cports[i] = FreePort(t)
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", cports[i])})
	}
	for i := range n {
		c.opts = append(c.opts, server.Options{
			ServerName: fmt.Sprintf("r%d", i+1), Host: "127.0.0.1", Port: FreePort(t),
			JetStream: true, StoreDir: t.TempDir(), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30,
			Cluster: server.ClusterOpts{Name: "jetrun-nodes", Host: "127.0.0.1", Port: cports[i]},
			Routes:  routes, NoSigs: true, NoLog: true,
		})
	}
	t.Cleanup(func() {
		for i := range n {
			c.Stop(i)
		}
	})
	for i := range n {
		c.Start(i)
	}
	waitPlaceable(t, c.Node(0))
	return c
}

// Start starts node i (from 0) on its ports and store and waits until
// it takes connections.
func (c *Nodes) Start(i int) {
	c.t.Helper()
	o := c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatalf("natstest: node %d: %v", i, err)
	}
	s.Start()
	if !s.ReadyForConnections(60 * time.Second) {
		s.Shutdown()
		c.t.Fatalf("natstest: node %d not ready within 60s", i)
	}
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
}

// Stop shuts node i down, if it runs, and waits until it is gone.
func (c *Nodes) Stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Node returns node i, nil while it is stopped.
func (c *Nodes) Node(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// URL is node i's client URL, the same across restarts.
func (c *Nodes) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port)
}

// Index returns the index of the node named name (r1 is 0), -1 if none.
func (c *Nodes) Index(name string) int {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	return -1
}
