package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// restartableCluster is a three-node cluster whose nodes can be stopped
// and started again on the same ports and stores.
type restartableCluster struct {
	t     *testing.T
	mu    sync.Mutex
	opts  []*server.Options
	nodes []*server.Server
}

func newRestartableCluster(t *testing.T) *restartableCluster {
	c := &restartableCluster{t: t}
	var routes []*url.URL
	cports := make([]int, 3)
	for i := range cports {
		cports[i] = natstest.FreePort(t)
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", cports[i])})
	}
	for i := range 3 {
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("q%d", i+1), Host: "127.0.0.1", Port: natstest.FreePort(t),
			JetStream: true, StoreDir: t.TempDir(), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30,
			Cluster: server.ClusterOpts{Name: "jetrun-quorum", Host: "127.0.0.1", Port: cports[i]},
			Routes:  routes, NoSigs: true, NoLog: true,
			Tags: []string{fmt.Sprintf("q%d", i+1)}, // for placing single-replica streams on one node
		})
		c.nodes = append(c.nodes, nil)
	}
	for i := range 3 {
		c.start(i)
	}
	for i := range 3 {
		c.ready(i)
	}
	t.Cleanup(func() {
		for i := range 3 {
			c.stop(i)
		}
	})
	return c
}

func (c *restartableCluster) start(i int) {
	o := *c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatal(err)
	}
	s.Start()
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
}

func (c *restartableCluster) ready(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.mu.Unlock()
	if !s.ReadyForConnections(60 * time.Second) {
		c.t.Fatalf("node %d not ready", i)
	}
}

func (c *restartableCluster) stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// placeable waits until a three-replica stream can be placed and gets a
// leader.
func (c *restartableCluster) placeable() {
	c.mu.Lock()
	node := c.nodes[0]
	c.mu.Unlock()
	_, pjs := natstest.Connect(c.t, node)
	natstest.Eventually(c.t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := pjs.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: 3})
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.Cluster != nil && info.Cluster.Leader != ""
	}, "cluster cannot place a three-replica stream")
}

// gatedHandler reaches a milestone (once per run), then waits until gate
// closes and completes, or returns the cause its context ended with.
func gatedHandler(gate <-chan struct{}) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		if len(run.Milestones()) == 0 {
			if _, err := run.Milestone(ctx, "began", nil); err != nil {
				return worker.Result{}, err
			}
		}
		select {
		case <-gate:
			return worker.Result{Summary: "done"}, nil
		case <-ctx.Done():
			return worker.Result{}, context.Cause(ctx)
		}
	})
}

// connect dials urls, reconnecting forever, closed at the test's cleanup.
func (c *restartableCluster) connect(urls string, opts ...nats.Option) *nats.Conn {
	nc, err := nats.Connect(urls, append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

func (c *restartableCluster) urls(first int) string {
	var out []string
	for i := range 3 {
		o := c.opts[(first+i)%3]
		out = append(out, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(out, ",")
}

// Two of three nodes go away for longer than the lease (quorum lost) while
// two workers hold waiting runs, and come back: the workers' liveness
// lapses and their attempts stop, but no worker died, so with MaxAttempts 1
// every run still completes (its stopped attempts are blinks).
func TestQuorumLossIsNotALostWorker(t *testing.T) {
	t.Parallel()
	const runs = 20
	c := newRestartableCluster(t)
	connect := func(first int) *nats.Conn { return c.connect(c.urls(first), nats.DontRandomize()) }
	gate := make(chan struct{})
	handler := gatedHandler(gate)
	c.placeable()
	logs := []*lockedBuffer{{}, {}}
	for i := range 2 {
		cfg := worker.Config{Lease: 2 * time.Second, MaxAttempts: 1, Concurrency: runs,
			Logger: slog.New(slog.NewTextHandler(logs[i], nil))}
		rt := jetruntest.OpenRuntime(t, connect(i+1), jetrun.Config{Streams: events.StreamOptions{Replicas: 3}})
		startWorkerOn(t, rt, cfg, map[string]worker.Handler{"quorum": handler})
	}
	nc := connect(0)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitForStreamLeaders(t, js, "JETRUN_EVENTS", "JETRUN_DISPATCH", "KV_jetrun_runs", "KV_jetrun_active")
	ctx := context.Background()
	store, err := runstore.Open(ctx, js, runstore.Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range runs {
		publish(t, js, "jetrun.dispatch.quorum", fmt.Sprintf(`{"runId":"q%d","input":{}}`, i))
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		for i := range runs {
			r, _, err := store.Get(ctx, fmt.Sprintf("q%d", i))
			if err != nil || r.Status != events.StatusRunning || r.Milestones < 1 {
				return false
			}
		}
		return true
	}, "runs not under way")

	lapses := func(i int) int { return strings.Count(logs[i].String(), "worker liveness lost") }
	before := []int{lapses(0), lapses(1)}
	c.stop(1)
	c.stop(2)
	natstest.Eventually(t, 60*time.Second, func() bool { return lapses(0) > before[0] && lapses(1) > before[1] },
		"the workers' liveness did not lapse")
	c.start(1)
	c.start(2)
	c.ready(1)
	c.ready(2)
	close(gate)

	var failed []string
	for i := range runs {
		id := fmt.Sprintf("q%d", i)
		var row *model.Row
		natstest.Eventually(t, 2*time.Minute, func() bool {
			r, _, err := store.Get(ctx, id)
			if err == nil && r.Status.Final() {
				row = r
				return true
			}
			return false
		}, "run %s did not end", id)
		if row.Status != events.StatusCompleted {
			failed = append(failed, fmt.Sprintf("%s %s/%s (attempt %d, handoffs %d, blinks %v)",
				id, row.Status, row.Reason, row.Attempt, row.Handoffs, row.Blinks))
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d runs did not complete: %v", len(failed), runs, failed)
	}
}

// A worker cut off from JetStream for longer than the lease (its node goes
// away; the cluster keeps quorum) loses its run to another worker. When it
// is back with the same epoch, its stopped attempt is recorded as a lapse,
// not a lost worker: an outage does not use up the run's attempts.
func TestLapsedWorkerWhoseRunWasTakenOverRecordsTheLapse(t *testing.T) {
	t.Parallel()
	c := newRestartableCluster(t)
	connect := func(node int, opts ...nats.Option) *nats.Conn {
		return c.connect(fmt.Sprintf("nats://127.0.0.1:%d", c.opts[node].Port), opts...)
	}
	gate := make(chan struct{})
	handler := gatedHandler(gate)
	c.placeable()
	nc := connect(0)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{Streams: events.StreamOptions{Replicas: 3}})
	natstest.WaitForStreamLeaders(t, js, "JETRUN_EVENTS", "JETRUN_DISPATCH", "KV_jetrun_runs", "KV_jetrun_active")
	store := engine.From(rt).Store()
	ctx := context.Background()
	logs := &lockedBuffer{} // both workers' logs, shown if the test fails
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs)
		}
	})
	cfg := func(id string) worker.Config {
		return worker.Config{ID: id, Lease: 2 * time.Second, MaxAttempts: 2, Concurrency: 4,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	}
	// Worker A reaches the cluster only through node 2.
	ncA := connect(2, nats.IgnoreDiscoveredServers())
	startWorkerOn(t, jetruntest.OpenRuntime(t, ncA, jetrun.Config{Streams: events.StreamOptions{Replicas: 3}}),
		cfg("wa"), map[string]worker.Handler{"lapse": handler})
	publish(t, js, "jetrun.dispatch.lapse", `{"runId":"lapse1","input":{}}`)
	natstest.Eventually(t, 30*time.Second, func() bool {
		r, _, err := store.Get(ctx, "lapse1")
		return err == nil && r.Status == events.StatusRunning && r.Worker == "wa" && r.Milestones >= 1
	}, "worker A did not start the run")

	startWorkerOn(t, rt, cfg("wb"), map[string]worker.Handler{"lapse": handler})
	c.stop(2) // A is cut off; its key expires and B takes the run over
	natstest.Eventually(t, 60*time.Second, func() bool {
		r, _, err := store.Get(ctx, "lapse1")
		return err == nil && r.Worker == "wb" && r.Attempt == 2
	}, "worker B did not take the run over")
	c.start(2)
	c.ready(2)
	var row *model.Row
	natstest.Eventually(t, 60*time.Second, func() bool {
		r, _, err := store.Get(ctx, "lapse1")
		row = r
		return err == nil && len(r.Blinks) > 0
	}, "worker A never recorded its lapse on the run B took over")
	close(gate)
	natstest.Eventually(t, 60*time.Second, func() bool {
		r, _, err := store.Get(ctx, "lapse1")
		row = r
		return err == nil && r.Status.Final()
	}, "run did not end")
	if row.Status != events.StatusCompleted || row.Attempt != 2 || row.Handoffs != 1 || !slices.Equal(row.Blinks, []int{1}) {
		t.Fatalf("run %s (%s: %s), attempt %d, handoffs %d, blinks %v; want completed on attempt 2 with attempt 1 a blink",
			row.Status, row.Reason, row.Error, row.Attempt, row.Handoffs, row.Blinks)
	}
}

// A chatty run on a three-node cluster with R3 streams: a clustered leader
// lets one message checked against a subject's last sequence be in process
// at a time, and every event of an attempt is checked against the run's
// status subject. No chunk is refused and sent again (a few may be, when an
// answer is lost on a loaded machine) and the worker reads nothing back to
// re-fence; every chunk is stored once, in order.
func TestChattyRunOnAThreeNodeClusterSendsEachChunkOnce(t *testing.T) {
	t.Parallel()
	nodes := natstest.RunCluster(t)
	nc, js := natstest.Connect(t, nodes[0])
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{Streams: events.StreamOptions{Replicas: 3}})
	natstest.WaitForStreamLeaders(t, js, "JETRUN_EVENTS", "KV_jetrun_runs")
	const chunks = 500
	var sent, reads atomic.Int64
	watch, _ := natstest.Connect(t, nodes[0])
	sub, err := watch.Subscribe(">", func(m *nats.Msg) {
		switch {
		case m.Subject == "jetrun.run.chatty.chunk":
			sent.Add(1)
		case strings.Contains(m.Subject, "GET.JETRUN_EVENTS"):
			reads.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	startWorkerOn(t, rt, worker.Config{}, map[string]worker.Handler{
		"chatty": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for i := 1; i <= chunks; i++ {
				if err := run.Chunk(ctx, i); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{}, nil
		}),
	})
	publish(t, js, "jetrun.dispatch.chatty", `{"runId":"chatty","input":{}}`)
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "chatty", time.Minute, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("run ended %s (%s): %s", row.Status, row.Reason, row.Error)
	}
	if err := sub.Unsubscribe(); err != nil { // before the replay below, whose deliveries it would see
		t.Fatal(err)
	}
	// A publish whose answer is lost or late on a loaded machine is sent
	// again (and deduplicated): a few. A window of 256 on R3 sent a hundred
	// publishes per chunk.
	if n := sent.Load(); n > chunks+chunks/50 {
		t.Errorf("%d chunk publishes for %d chunks: refused and sent again", n, chunks)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("the worker read the events stream %d times to re-fence a run nobody else wrote", n)
	}
	var got []int64
	for _, c := range jetruntest.Chunks(jetruntest.ReadEvents(t, js, "chatty")) {
		got = append(got, c.Seq)
	}
	if len(got) != chunks {
		t.Fatalf("%d chunks stored, want %d", len(got), chunks)
	}
	for i, seq := range got {
		if seq != int64(i+1) {
			t.Fatalf("chunk %d stored as seq %d", i+1, seq)
		}
	}
}

// A run's outcome cannot be written (its row's stream is away) while the
// worker that holds it lives on: once the stream is back the worker
// releases the row itself — it does not leave the run held by a live
// worker that does not execute it, which other workers would defer to
// for as long as that worker lives — and the run runs again and completes.
// The runs bucket lives on one node, everything else on another, so only
// row writes fail.
func TestAnOutcomeThatCannotBeWrittenLeavesNoRunHeldByALiveWorker(t *testing.T) {
	t.Parallel()
	c := newRestartableCluster(t)
	c.placeable()
	nc := c.connect(fmt.Sprintf("nats://127.0.0.1:%d", c.opts[1].Port), nats.IgnoreDiscoveredServers())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := events.Namespace("")
	on := func(node string) *jetstream.Placement { return &jetstream.Placement{Tags: []string{node}} }
	for bucket, node := range map[string]string{wire.Namespace(ns).RunsBucket(): "q1", wire.Namespace(ns).ActiveBucket(): "q2"} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, Storage: jetstream.FileStorage,
			LimitMarkerTTL: time.Minute, Placement: on(node)}); err != nil {
			t.Fatalf("create bucket %s: %v", bucket, err)
		}
	}
	for _, cfg := range wire.StreamConfigs(wire.Namespace(ns), events.StreamOptions{}) {
		cfg.Placement = on("q2")
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatalf("create stream %s: %v", cfg.Name, err)
		}
	}
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	gate := make(chan struct{})
	var calls atomic.Int64
	logs := &lockedBuffer{}
	const lease = 20 * time.Second // the dispatch comes back a lease after the attempt's last InProgress
	startWorkerOn(t, rt, worker.Config{Lease: lease, Concurrency: 1, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		map[string]worker.Handler{"lost-outcome": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if calls.Add(1) == 1 {
				<-gate
			}
			return worker.Result{Summary: "done"}, nil
		})})
	publish(t, js, "jetrun.dispatch.lost-outcome", `{"runId":"lost","input":{}}`)
	store := engine.From(rt).Store()
	jetruntest.WaitRow(t, store, "lost", time.Minute, func(r *model.Row) bool { return r.Status == events.StatusRunning })

	c.stop(0) // the runs bucket's only node
	close(gate)
	natstest.Eventually(t, time.Minute, func() bool { return strings.Contains(logs.String(), "record run outcome") },
		"the worker did not give up writing the outcome")
	c.start(0)
	c.ready(0)
	natstest.Eventually(t, time.Minute, func() bool {
		r, _, err := store.Get(ctx, "lost")
		return err == nil && r.Attempt == 1 && r.Worker == "" && r.Handoffs == 1
	}, "the live worker did not release the run it no longer executes; its log:\n%s", logs)
	row := jetruntest.WaitRow(t, store, "lost", 2*time.Minute, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || calls.Load() != 2 {
		t.Fatalf("run ended %s at attempt %d after %d handler calls, want completed at attempt 2 after 2", row.Status, row.Attempt, calls.Load())
	}
}
