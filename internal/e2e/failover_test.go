//go:build faults

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/agents/demo"
	"github.com/jetrun/jetrun/internal/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// cluster is three nats-server processes forming one JetStream cluster.
type cluster struct {
	t     *testing.T
	nodes []*proc
	args  [][]string
	urls  []string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var routes []string
	cports := make([]int, 3)
	for i := range cports {
		cports[i] = natstest.FreePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cports[i]))
	}
	for i := range 3 {
		port := natstest.FreePort(t)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", port))
		c.args = append(c.args, []string{
			"-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-n", fmt.Sprintf("n%d", i+1),
			"--cluster_name", "jetrun-faults", "--cluster", routes[i], "--routes", strings.Join(routes, ","),
		})
		c.nodes = append(c.nodes, start(t, "nats-server", nil, c.args[i]...))
	}
	return c
}

// kill9 kills node i with SIGKILL.
func (c *cluster) kill9(i int) { c.nodes[i].kill() }

// restart starts node i again on its port and store.
func (c *cluster) restart(i int) { c.nodes[i] = start(c.t, "nats-server", nil, c.args[i]...) }

// url lists the nodes starting with node first, as a fleet spreads its
// connections.
func (c *cluster) url(first int) string {
	return strings.Join(append(append([]string{}, c.urls[first:]...), c.urls[:first]...), ",")
}

// Under a few hundred runs on a three-node cluster (R3 streams and
// buckets, two child-worker processes), kill -9 the node leading
// JETRUN_EVENTS and bring it back later, then kill two nodes (quorum lost)
// for a while and bring them back. Every run completes (none ends error,
// none is lost), and each worker writes a bounded number of log lines
// during the outages. Run with: make test-faults.
func TestClusterFailoverUnderLoad(t *testing.T) {
	const runs = 300
	const outage = 20 * time.Second
	c := startCluster(t)
	var (
		nc  *nats.Conn
		err error
	)
	natstest.Eventually(t, 60*time.Second, func() bool {
		nc, err = nats.Connect(c.url(0), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		return err == nil
	}, "cluster did not come up")
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	}, "JetStream has no meta leader")

	var workers []*proc
	for i := range 2 {
		p := start(t, "child-worker", map[string]string{
			"JETRUN_NATS_URL":    c.url(i + 1),
			"JETRUN_WORKER_ID":   fmt.Sprintf("w%d", i+1),
			"JETRUN_REPLICAS":    "3",
			"JETRUN_CONCURRENCY": fmt.Sprint(runs),
		})
		p.waitLog("child-worker serving", 120*time.Second)
		workers = append(workers, p)
	}
	ctx := context.Background()
	client, err := parent.New(ctx, nc, parent.Config{Streams: events.StreamOptions{Replicas: 3}})
	if err != nil {
		t.Fatal(err)
	}
	store := client.Store()
	// Warnings and errors each worker wrote so far.
	stderrLines := func() []int {
		var n []int
		for _, w := range workers {
			out := w.stderr.String()
			n = append(n, strings.Count(out, "level=WARN")+strings.Count(out, "level=ERROR"))
		}
		return n
	}
	wave := func(prefix string) []string {
		var ids []string
		for i := range runs {
			id := fmt.Sprintf("%s%d", prefix, i)
			ids = append(ids, id)
			if _, err := client.Dispatch(ctx, parent.Request{
				AgentType: demo.AgentType, RunID: id, Input: map[string]int{"steps": 40, "stepMs": 1000},
			}); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	settle := func(ids []string) map[events.Status]int {
		counts := map[events.Status]int{}
		natstest.Eventually(t, 10*time.Minute, func() bool {
			clear(counts)
			for _, id := range ids {
				row, _, err := store.Get(ctx, id)
				if err != nil {
					return false
				}
				if row.Status.Final() {
					counts[row.Status]++
				}
			}
			return counts[events.StatusCompleted]+counts[events.StatusError]+counts[events.StatusAborted] == len(ids)
		}, "runs not final")
		return counts
	}
	leaderOf := func(stream string) int {
		var leader string
		natstest.Eventually(t, 60*time.Second, func() bool {
			s, err := js.Stream(ctx, stream)
			if err != nil || s.CachedInfo().Cluster == nil {
				return false
			}
			leader = s.CachedInfo().Cluster.Leader
			return leader != ""
		}, "no leader of %s", stream)
		var i int
		fmt.Sscanf(leader, "n%d", &i)
		return i - 1
	}

	// 1. The leader of JETRUN_EVENTS killed, back after the outage.
	ids := wave("a")
	time.Sleep(5 * time.Second) // the runs are streaming (40 s each); nothing waits on this
	victim := leaderOf("JETRUN_EVENTS")
	before := stderrLines()
	began := time.Now()
	c.kill9(victim)
	time.Sleep(outage)
	c.restart(victim)
	counts := settle(ids)
	took := time.Since(began)
	after := stderrLines()
	t.Logf("n%d (leader of JETRUN_EVENTS) killed for %s under %d runs: %v after %s; worker log lines meanwhile: %d, %d",
		victim+1, outage, runs, counts, took.Round(time.Second), after[0]-before[0], after[1]-before[1])
	if counts[events.StatusCompleted] != runs {
		t.Errorf("leader killed: %v, want %d completed", counts, runs)
	}
	checkLines(t, workers, before, after, took)

	// 2. Two nodes killed (quorum lost), back after the outage.
	ids = wave("b")
	time.Sleep(5 * time.Second)
	keep := leaderOf("JETRUN_EVENTS")
	before = stderrLines()
	began = time.Now()
	var killed []int
	for i := range 3 {
		if i != keep {
			c.kill9(i)
			killed = append(killed, i)
		}
	}
	time.Sleep(outage)
	for _, i := range killed {
		c.restart(i)
	}
	counts = settle(ids)
	took = time.Since(began)
	after = stderrLines()
	t.Logf("two nodes killed for %s under %d runs: %v after %s; worker log lines meanwhile: %d, %d",
		outage, runs, counts, took.Round(time.Second), after[0]-before[0], after[1]-before[1])
	if counts[events.StatusCompleted] != runs {
		t.Errorf("quorum lost: %v, want %d completed", counts, runs)
	}
	checkLines(t, workers, before, after, took)
	var notOne int
	for _, prefix := range []string{"a", "b"} {
		for i := range runs {
			if row, _, err := store.Get(ctx, fmt.Sprintf("%s%d", prefix, i)); err == nil && row.Attempt != 1 {
				notOne++
			}
		}
	}
	t.Logf("runs taken over (attempt > 1): %d of %d", notOne, 2*runs)
}

// checkLines bounds the warnings and errors each worker wrote during an
// outage: at most one per message and class of fault every 10 s (a few
// dozen messages could), whatever the number of runs.
func checkLines(t *testing.T, workers []*proc, before, after []int, took time.Duration) {
	t.Helper()
	bound := 40 * (1 + int(took/(10*time.Second)))
	for i := range workers {
		if n := after[i] - before[i]; n > bound {
			t.Errorf("worker %d wrote %d lines in %s, want at most %d", i+1, n, took, bound)
		}
	}
}
