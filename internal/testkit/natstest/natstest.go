// Package natstest runs real nats-servers with JetStream for tests: embedded
// in the test process, on a random loopback port, with a store under
// t.TempDir(), shut down in t.Cleanup.
package natstest

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RunServer starts a JetStream-enabled server for the test.
func RunServer(t testing.TB) *server.Server {
	t.Helper()
	return RunServerWithOptions(t, &server.Options{})
}

// RunServerWithOptions starts a server from opts, filling in a random port,
// loopback host, a temporary store and explicit JetStream limits; it is
// shut down at the test's cleanup.
func RunServerWithOptions(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	ns := startServer(t, opts)
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// startServer is RunServerWithOptions without the cleanup: the caller shuts
// the server down.
func startServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	opts.JetStream = true
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	if opts.JetStreamMaxMemory == 0 {
		opts.JetStreamMaxMemory = 256 << 20
	}
	if opts.JetStreamMaxStore == 0 {
		opts.JetStreamMaxStore = 4 << 30
	}
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("natstest: server not ready within 10s")
	}
	return ns
}

// ExampleConn starts a JetStream server for a runnable example, which has
// no *testing.T (on a random loopback port, with a temporary store), and
// connects to it; stop closes both and removes the store. A failure ends
// the program (log.Fatal). Code outside an example connects to its own
// server: nats.Connect(nats.DefaultURL).
func ExampleConn() (nc *nats.Conn, stop func()) {
	dir, err := os.MkdirTemp("", "jetrun-example-")
	if err != nil {
		log.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir,
		JetStreamMaxMemory: 256 << 20, JetStreamMaxStore: 4 << 30, NoSigs: true, NoLog: true,
	})
	if err != nil {
		log.Fatalf("natstest: new server: %v", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("natstest: server not ready within 10s")
	}
	if nc, err = nats.Connect(ns.ClientURL()); err != nil {
		log.Fatalf("natstest: connect: %v", err)
	}
	return nc, func() {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}

// Connect opens a client connection to ns, closed in t.Cleanup.
func Connect(t testing.TB, ns *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Eventually polls cond every 10ms until it returns true or timeout passes,
// then fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("natstest: timed out after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RunCluster starts a three-node JetStream cluster on loopback and returns
// its servers once JetStream has a meta leader. Its tests are the slow
// tier: under -short (make test-short) RunCluster skips the test; make
// test runs them.
func RunCluster(t testing.TB) []*server.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("natstest: a three-node cluster test, skipped under -short (make test-short); make test runs it")
	}
	var servers []*server.Server
	for try := 1; ; try++ {
		var err error
		if servers, err = startCluster(t); err == nil {
			break
		} else if try == 3 {
			t.Fatalf("natstest: %v (%d tries)", err, try)
		}
	}
	Eventually(t, 30*time.Second, func() bool {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return true
			}
		}
		return false
	}, "cluster has no JetStream meta leader")
	waitPlaceable(t, servers[0])
	return servers
}

// waitPlaceable waits until a three-replica stream can be placed through
// node s and gets a leader: the cluster is ready.
func waitPlaceable(t testing.TB, s *server.Server) {
	t.Helper()
	nc, js := Connect(t, s)
	defer nc.Close()
	Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "NATSTEST_PROBE", Subjects: []string{"natstest.probe"}, Replicas: 3})
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.Cluster != nil && info.Cluster.Leader != ""
	}, "cluster cannot place a three-replica stream")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, "NATSTEST_PROBE")
}

// startCluster starts three routed servers. Their cluster ports are picked
// free beforehand (routes must name them), so another test may take one in
// between: then a server cannot listen for routes, is never ready, and the
// servers are shut down for a new try with other ports.
func startCluster(t testing.TB) ([]*server.Server, error) {
	t.Helper()
	ports := make([]int, 3)
	var routes []*url.URL
	for i := range ports {
		ports[i] = FreePort(t)
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	servers := make([]*server.Server, 3)
	for i := range servers {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(),
			JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30,
			Cluster: server.ClusterOpts{Name: "jetrun-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
			NoSigs:  true, NoLog: true,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("natstest: new cluster server: %v", err)
		}
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		s.Start()
		servers[i] = s
	}
	for _, s := range servers {
		if !s.ReadyForConnections(30 * time.Second) {
			for _, s := range servers {
				s.Shutdown()
			}
			return nil, fmt.Errorf("cluster server %s not ready within 30s", s.Name())
		}
	}
	return servers, nil
}

// WaitForStreamLeaders waits until every named stream has a cluster leader,
// as a freshly created replicated stream (or KV bucket: "KV_<bucket>")
// needs before it takes writes.
func WaitForStreamLeaders(t testing.TB, js jetstream.JetStream, names ...string) {
	t.Helper()
	for _, name := range names {
		Eventually(t, 30*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := js.Stream(ctx, name)
			if err != nil {
				return false
			}
			info, err := s.Info(ctx)
			return err == nil && (info.Cluster == nil || info.Cluster.Leader != "")
		}, "stream %s has no leader", name)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago, below
// the kernel's ephemeral range (32768 and up on Linux): a port the kernel
// hands out for ":0" is also where it puts the source port of outgoing
// connections, so a test's own client connections could take it before
// the server listens on it, or while a stopped node waits to start again
// on it (a node then never becomes ready). The ports are handed out in
// turn from a random start, so parallel tests in one process never get
// the same one and test processes rarely meet.
func FreePort(t testing.TB) int {
	t.Helper()
	for range portSpan {
		p := int(nextPort.Add(1)%portSpan) + portBase
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use
		}
		_ = l.Close()
		return p
	}
	t.Fatalf("natstest: no free port in %d-%d", portBase, portBase+portSpan-1)
	return 0
}

// The ports FreePort hands out: portBase up to the ephemeral range.
const (
	portBase = 10_000
	portSpan = 22_000
)

// nextPort is where FreePort's turn stands, from a random start per
// process.
var nextPort atomic.Int64

func init() { nextPort.Store(rand.Int64N(portSpan)) }
