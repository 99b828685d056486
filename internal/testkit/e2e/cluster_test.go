//go:build cluster

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

// cluster is the repository's nats-cluster/ configuration run as three
// nats-server processes, on free ports instead of 4222-4224 and 6222-6224
// and with stores under the test's directory.
type cluster struct {
	t     *testing.T
	confs [3]string
	names [3]string
	nodes [3]*proc
	urls  []string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t}
	dir := t.TempDir()
	var swaps []string
	for i := range 3 {
		swaps = append(swaps,
			fmt.Sprintf("127.0.0.1:%d", 4222+i), fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)),
			fmt.Sprintf("127.0.0.1:%d", 6222+i), fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)),
			fmt.Sprintf("./data/nats-n%d", i+1), filepath.Join(dir, fmt.Sprintf("n%d", i+1)))
	}
	// The nodes include ../nats-users.conf (nats-server resolves includes
	// relative to the including file): the same layout, under dir.
	users, err := os.ReadFile("../../../nats-users.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats-users.conf"), users, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "nats-cluster"), 0o700); err != nil {
		t.Fatal(err)
	}
	swap := strings.NewReplacer(swaps...)
	for i := range 3 {
		raw, err := os.ReadFile(fmt.Sprintf("../../../nats-cluster/n%d.conf", i+1))
		if err != nil {
			t.Fatal(err)
		}
		c.confs[i] = filepath.Join(dir, "nats-cluster", fmt.Sprintf("n%d.conf", i+1))
		if err := os.WriteFile(c.confs[i], []byte(swap.Replace(string(raw))), 0o600); err != nil {
			t.Fatal(err)
		}
		c.names[i] = fmt.Sprintf("jetrun-n%d", i+1)
		c.urls = append(c.urls, swap.Replace(fmt.Sprintf("nats://127.0.0.1:%d", 4222+i)))
	}
	for i := range 3 {
		c.start(i)
	}
	var nc *nats.Conn
	natstest.Eventually(t, 30*time.Second, func() bool {
		var err error
		nc, err = nats.Connect(c.url(), nats.UserInfo("admin", rolePasswords["admin"]))
		return err == nil
	}, "no node of the cluster came up")
	defer nc.Close()
	js, _ := jetstream.New(nc)
	natstest.Eventually(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: 3})
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.Cluster != nil && info.Cluster.Leader != ""
	}, "the three-node cluster cannot place a three-replica stream")
	_ = js.DeleteStream(context.Background(), "PROBE")
	return c
}

func (c *cluster) url() string { return strings.Join(c.urls, ",") }

func (c *cluster) start(i int) { c.nodes[i] = start(c.t, "nats-server", nil, "-c", c.confs[i]) }

func (c *cluster) index(name string) int {
	for i, n := range c.names {
		if n == name {
			return i
		}
	}
	c.t.Fatalf("no node named %q", name)
	return -1
}

// leaderName returns the name of the node leading stream, or "" when it
// cannot be read.
func (c *cluster) leaderName(js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// leader returns the node leading stream.
func (c *cluster) leader(js jetstream.JetStream, stream string) int {
	c.t.Helper()
	var name string
	natstest.Eventually(c.t, 30*time.Second, func() bool {
		name = c.leaderName(js, stream)
		return name != ""
	}, "stream %s has no leader", stream)
	return c.index(name)
}

// A three-node cluster with R3 streams and bucket, one parent-worker and
// two child-workers, hundreds of runs in flight (half awaited, half
// detached with a finish webhook). The node leading JETRUN_EVENTS is killed
// with -9 and restarted; then two nodes are killed for a while (quorum
// lost) and restarted. Every run completes, once; every finish is
// delivered; the failover is not a run failure; and logs stay bounded while
// the cluster is down. It is the heaviest test here (six processes, 300
// runs, a minute and more), so it runs with `make test-cluster`; make test
// runs the in-process version (pkg/worker TestEventsLeaderLossUnderLoad).
func TestClusterLosesNodesAndNoRun(t *testing.T) {
	c := startCluster(t)
	// The test itself (probes, the parent client that creates the R3
	// streams) is the operator, admin; the processes run as their roles.
	nc, err := nats.Connect(c.url(), nats.UserInfo("admin", rolePasswords["admin"]), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{Streams: events.StreamOptions{Replicas: 3}})
	client, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	natstest.WaitForStreamLeaders(t, js, "JETRUN_DISPATCH", "JETRUN_EVENTS", "JETRUN_SIGNALS", "KV_jetrun_runs", "KV_jetrun_active")
	e := &env{url: c.url(), js: js, client: client, store: engine.From(rt).Store()}
	hook := newHookServer(t)
	replicas := map[string]string{"JETRUN_REPLICAS": "3", "JETRUN_CONCURRENCY": "400", "JETRUN_LOG_LEVEL": "info", "JETRUN_LEASE": "5s"}
	pw := e.parentWorker(t, "pw-c", hook.URL, mergeAll(replicas, roleEnv(c.url(), "parent")))
	kids := []*proc{e.childWorker(t, "child-c1", mergeAll(replicas, roleEnv(c.url(), "child"))),
		e.childWorker(t, "child-c2", mergeAll(replicas, roleEnv(c.url(), "child")))}

	const n = 300
	ids := make([]string, n)
	var awaited sync.WaitGroup
	awaitErrs := make(chan error, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("cl-%03d", i)
	}
	each(t, n, 16, func(i int) error {
		req := parent.Request{AgentType: demo.AgentType, RunID: ids[i], Input: map[string]int{"steps": 20, "stepMs": 500}}
		if i%2 == 1 {
			req.Detached = &events.Detached{OnFinish: "hook"}
		}
		if _, err := client.Dispatch(context.Background(), req); err != nil {
			return err
		}
		if i%2 == 0 {
			awaited.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				if _, err := client.Await(ctx, req.RunID); err != nil {
					awaitErrs <- fmt.Errorf("await %s: %w", req.RunID, err)
				}
			})
		}
		return nil
	})
	waitRunning := func(min int) {
		natstest.Eventually(t, 60*time.Second, func() bool {
			running := 0
			for _, id := range ids {
				if r, _, err := e.store.Get(context.Background(), id); err == nil && r.Status == events.StatusRunning && r.Milestones >= 1 {
					running++
				}
			}
			return running >= min
		}, "fewer than %d runs under way", min)
	}
	waitRunning(n / 2)

	// 1. The leader of JETRUN_EVENTS dies: a normal leader election.
	victim := c.leader(js, "JETRUN_EVENTS")
	t.Logf("killing %s, leader of JETRUN_EVENTS", c.names[victim])
	c.nodes[victim].kill()
	// The node stays down until the others have elected a new leader.
	natstest.Eventually(t, 60*time.Second, func() bool {
		l := c.leaderName(js, "JETRUN_EVENTS")
		return l != "" && l != c.names[victim]
	},
		"no new leader of JETRUN_EVENTS")
	c.start(victim)

	// 2. Two nodes die: no quorum for a while.
	// Log lines, less the INFO lines about one run (taken over, resumed,
	// finished, handed off): a worker that lapsed in step 1 may take its
	// runs back while step 2 begins, a line each; those are counted in the
	// runs, not as noise.
	lines := func() []int {
		var out []int
		for _, p := range append([]*proc{pw}, kids...) {
			n := 0
			for line := range strings.Lines(p.stderr.String()) {
				if !strings.Contains(line, "level=INFO") || !strings.Contains(line, " run_id=") {
					n++
				}
			}
			out = append(out, n)
		}
		return out
	}
	before := lines()
	down := []int{(victim + 1) % 3, (victim + 2) % 3}
	t.Logf("killing %s and %s: quorum lost", c.names[down[0]], c.names[down[1]])
	outage := time.Now()
	lapses := func() []int {
		var out []int
		for _, k := range kids {
			out = append(out, strings.Count(k.stderr.String(), "worker liveness lost"))
		}
		return out
	}
	lapsedBefore := lapses()
	for _, i := range down {
		c.nodes[i].kill()
	}
	// Down until every child-worker's liveness has lapsed: the outage
	// outlasts the lease.
	natstest.Eventually(t, 2*time.Minute, func() bool {
		now := lapses()
		for i := range now {
			if now[i] <= lapsedBefore[i] {
				return false
			}
		}
		return true
	}, "the child-workers' liveness never lapsed")
	// The outage ends when the nodes come back: what the processes log
	// while they recover is counted in the runs, not here.
	after := lines()
	outageLen := time.Since(outage)
	for _, i := range down {
		c.start(i)
	}

	awaited.Wait()
	close(awaitErrs)
	for err := range awaitErrs {
		t.Error(err)
	}
	var failed, missing, duplicated []string
	for _, id := range ids {
		var row, last *model.Row
		natstest.Eventually(t, 3*time.Minute, func() bool {
			r, _, err := e.store.Get(context.Background(), id)
			if err == nil {
				last = r
			}
			if err == nil && r.Status.Final() && (r.Detached == nil || !r.Delivered[r.Status].IsZero()) {
				row = r
				return true
			}
			return false
		}, "run %s did not end (with its finish delivered); its row: %v", id, rowDump{r: &last, js: js, kids: kids})
		if row.Status != events.StatusCompleted {
			failed = append(failed, fmt.Sprintf("%s %s/%s %s", id, row.Status, row.Reason, row.Error))
		}
		if row.Detached != nil {
			switch hook.count(id + ".completed") {
			case 0:
				missing = append(missing, id)
			case 1:
			default:
				duplicated = append(duplicated, id)
			}
		}
	}
	twice := completedTwice(t, js, ids)
	perSecond := make([]float64, len(before))
	for i := range before {
		perSecond[i] = float64(after[i]-before[i]) / outageLen.Seconds()
	}
	t.Logf("runs %d: not completed %d, executed to completion twice %d; finishes missing %d, duplicated %d; "+
		"log lines/s during the outage (parent-worker, child-workers): %.1f", n, len(failed), len(twice), len(missing), len(duplicated), perSecond)
	if len(failed) > 0 {
		t.Errorf("%d runs did not complete: %v", len(failed), failed[:min(len(failed), 10)])
	}
	if len(twice) > 0 {
		t.Errorf("runs completed twice: %v", twice)
	}
	if len(missing) > 0 {
		t.Errorf("finishes never delivered: %v", missing)
	}
	// Bounded logs: a few lines per second at most, not thousands.
	for i, r := range perSecond {
		if r > 20 {
			t.Errorf("process %d wrote %.0f log lines/s while the cluster was down", i, r)
		}
	}
}

// completedTwice returns the runs with more than one "completed" status
// event on their subjects.
func completedTwice(t *testing.T, js jetstream.JetStream, ids []string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, "JETRUN_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jetrun.run.*.status"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := info.NumPending
	counts := map[string]int{}
	empty := 0 // fetches in a row that returned nothing
	for left > 0 {
		batch, err := cons.Fetch(int(min(left, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var s struct {
				RunID  string `json:"runId"`
				Status string `json:"status"`
			}
			if json.Unmarshal(m.Data(), &s) == nil && s.Status == string(events.StatusCompleted) {
				counts[s.RunID]++
			}
		}
		if got == 0 {
			// An ordered consumer that resets (the stream's leader changed a
			// moment ago, a loaded machine missed a heartbeat) delivers
			// nothing for a while, then goes on where it was.
			if empty++; empty < 6 {
				continue
			}
			t.Fatalf("status events stopped short: %d left", left)
		}
		empty = 0
		left -= uint64(got)
	}
	var twice []string
	for _, id := range ids {
		if counts[id] > 1 {
			twice = append(twice, id)
		}
	}
	return twice
}

// rowDump prints a row as JSON when formatted (a failure message's
// argument, read at the failure).
type rowDump struct {
	r    **model.Row
	js   jetstream.JetStream
	kids []*proc // child-workers: SIGQUIT, so their goroutine stacks are in the failure's output
}

// afterStepdown asks the agent type's consumer's leader to step down and
// says whether the run then ends: whether the consumer's state on its
// leader was what held the run's dispatch back (a pending message the
// server does not redeliver).
func (d rowDump) afterStepdown() string {
	r := *d.r
	subject := "$JS.API.CONSUMER.LEADER.STEPDOWN.JETRUN_DISPATCH." + wire.AgentConsumer(r.AgentType)
	if _, err := d.js.Conn().Request(subject, nil, 5*time.Second); err != nil {
		return "consumer leader stepdown: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bucket, err := d.js.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		return "after a consumer leader stepdown: " + err.Error()
	}
	status := "unknown"
	for ctx.Err() == nil {
		if e, err := bucket.Get(ctx, r.ID); err == nil {
			var now model.Row
			if json.Unmarshal(e.Value(), &now) == nil {
				status = string(now.Status)
				if now.Status.Final() {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return "30 s after a consumer leader stepdown the run is " + status
}

func (d rowDump) String() string {
	if *d.r == nil {
		return "none"
	}
	b, _ := json.Marshal(*d.r)
	out := string(b)
	if seq := (*d.r).DispatchSeq; seq > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s, err := d.js.Stream(ctx, "JETRUN_DISPATCH"); err == nil {
			state := "stored"
			if _, err := s.GetMsg(ctx, seq); err != nil {
				state = err.Error()
			}
			out += fmt.Sprintf("; its dispatch %d: %s", seq, state)
		}
		// Whether the dispatch is offered at all: pending acks and
		// redeliveries of the agent type's consumer.
		if c, err := d.js.Consumer(ctx, "JETRUN_DISPATCH", wire.AgentConsumer((*d.r).AgentType)); err == nil {
			if info, err := c.Info(ctx); err == nil {
				out += fmt.Sprintf("; consumer %s: ack pending %d, redelivered %d, pending %d, delivered up to %d",
					info.Name, info.NumAckPending, info.NumRedelivered, info.NumPending, info.Delivered.Stream)
			}
		}
		out += "; " + d.afterStepdown()
	}
	// Which execution holds the run, and where it waits: each child-worker
	// prints every goroutine's stack on SIGQUIT (in its stderr, below).
	for _, k := range d.kids {
		if !k.exited() {
			_ = k.cmd.Process.Signal(syscall.SIGQUIT)
			_ = k.wait(10 * time.Second)
		}
	}
	return out
}

// The lease trade-off, measured (issue 23, item 5; docs/leases.md): with
// 32 runs in flight on two child-workers, one node is killed with -9:
// either the node one child-worker is connected to (not the liveness
// bucket's leader: that worker reconnects elsewhere), or the node leading
// the liveness bucket (KV_jetrun_active; every worker's renewals then wait
// for a new leader). It prints, per lease and node, how many attempts the
// failover restarted. Every run completes, and none is handed off twice for
// the one fault.
func TestClusterNodeKillRestartsPerLease(t *testing.T) {
	for _, lease := range []string{"3s", "15s"} {
		for _, kill := range []string{"worker-node", "liveness-leader"} {
			t.Run("lease="+lease+"/kill="+kill, func(t *testing.T) {
				restarted, twice := nodeKillRestarts(t, lease, kill == "liveness-leader")
				t.Logf("JETRUN_LEASE=%s, kill %s: restarted %d of 32 attempts in flight; runs handed off twice: %d",
					lease, kill, restarted, twice)
				if twice > 0 {
					t.Errorf("%d runs were handed off twice for one node kill", twice)
				}
			})
		}
	}
}

func nodeKillRestarts(t *testing.T, lease string, killLeader bool) (restarted, twice int) {
	c := startCluster(t)
	nc, err := nats.Connect(c.url(), nats.UserInfo("admin", rolePasswords["admin"]), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{Streams: events.StreamOptions{Replicas: 3}})
	client, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	natstest.WaitForStreamLeaders(t, js, "JETRUN_DISPATCH", "JETRUN_EVENTS", "JETRUN_SIGNALS", "KV_jetrun_runs", "KV_jetrun_active")
	e := &env{url: c.url(), js: js, client: client, store: engine.From(rt).Store()}
	hook := newHookServer(t)
	vars := map[string]string{"JETRUN_REPLICAS": "3", "JETRUN_LEASE": lease, "JETRUN_LOG_LEVEL": "info"}
	e.parentWorker(t, "pw-l", hook.URL, mergeAll(vars, roleEnv(c.url(), "parent")))
	leader := c.leader(js, "KV_jetrun_active")
	victim := leader
	if !killLeader {
		victim = (leader + 1) % 3
	}
	// The first child-worker is given only the victim's URL (it learns the
	// others from the cluster), so it is connected there when it dies.
	kids := []*proc{e.childWorker(t, "child-l1", mergeAll(vars, roleEnv(c.urls[victim], "child"))),
		e.childWorker(t, "child-l2", mergeAll(vars, roleEnv(c.url(), "child")))}
	const n = 32
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("lk-%02d", i)
		e.dispatch(t, ids[i], 60, 500) // 30 s: in flight through the failover
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		for _, id := range ids {
			if r, _, err := e.store.Get(context.Background(), id); err != nil || r.Status != events.StatusRunning || r.Milestones < 1 {
				return false
			}
		}
		return true
	}, "runs not under way")
	held := 0
	for _, id := range ids {
		if r, _, err := e.store.Get(context.Background(), id); err == nil && r.Worker == "child-l1" {
			held++
		}
	}
	t.Logf("killing %s (KV_jetrun_active leader: %v); child-l1, connected to it, holds %d runs", c.names[victim], killLeader, held)
	killed := time.Now()
	c.nodes[victim].kill()
	natstest.Eventually(t, 60*time.Second, func() bool {
		l := c.leaderName(js, "KV_jetrun_active")
		return l != "" && l != c.names[victim]
	}, "no leader of KV_jetrun_active")
	t.Logf("KV_jetrun_active has a leader %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	c.start(victim)
	for _, id := range ids {
		var row *model.Row
		natstest.Eventually(t, 3*time.Minute, func() bool {
			r, _, err := e.store.Get(context.Background(), id)
			row = r
			return err == nil && r.Status.Final()
		}, "run %s did not end; child-worker logs:\n%s\n%s", id, kids[0].stderr.String(), kids[1].stderr.String())
		if row.Status != events.StatusCompleted {
			t.Errorf("run %s ended %s/%s: %s", id, row.Status, row.Reason, row.Error)
		}
		if row.Attempt > 1 {
			restarted++
		}
		if row.Attempt > 2 {
			twice++
			t.Logf("run %s: attempt %d, handoffs %d, blinks %v", id, row.Attempt, row.Handoffs, row.Blinks)
		}
	}
	for i, k := range kids {
		t.Logf("child-l%d lapsed %d times", i+1, strings.Count(k.stderr.String(), "stopping every attempt of this worker"))
	}
	return restarted, twice
}
