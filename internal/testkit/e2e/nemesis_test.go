//go:build cluster

package e2e_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

var (
	nemesisSeed     = flag.Uint64("nemesis.seed", 0, "seed of the nemesis test's fault schedule and load (0: a new one, printed)")
	nemesisDuration = flag.Duration("nemesis.duration", 150*time.Second, "how long the nemesis test injects faults under load")
	nemesisInFlight = flag.Int("nemesis.inflight", 8, "top-level runs the nemesis test keeps in flight")
)

// nemesisLease is the child-workers' lease: short, so takeovers after a
// kill or a long pause come within the schedule.
const nemesisLease = 3 * time.Second

// TestClusterNemesis runs steady load (plain, detached with a webhook
// finish, keyed, nested and stepped runs) on the nats-cluster/ three-node
// cluster, one parent-worker, two child-workers (demo) and two
// nemesisworkers (durable steps with usage, nested runs, tree budgets), all
// as their roles, while a seeded schedule of faults hits them: kill -9 and
// restart of a node, a child-worker or the parent-worker, SIGSTOP then
// SIGCONT of any of them, deletion of a durable consumer. Then it lets the
// system settle and checks what users would: every run ended, none
// completed twice, every finish reached the webhook (by idempotency key;
// more than once only across a fault), no stored step's work ran again,
// budgets held, each run's and tree's usage is what its steps reported,
// runs of one concurrency key never overlapped, and awaiting callers saw
// each run's real end. Violations name their runs.
//
// The seed is printed (nemesis seed=N) and -nemesis.seed=N replays the
// same schedule and the same sequence of runs (their interleaving follows
// the machine). The default schedule is short (make test-cluster);
// -nemesis.duration=30m runs a long one (make test-nemesis).
func TestClusterNemesis(t *testing.T) {
	seed := *nemesisSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()) % 1_000_000_000
	}
	dur := *nemesisDuration
	t.Logf("nemesis seed=%d duration=%s (replay: -nemesis.seed=%d -nemesis.duration=%s)", seed, dur, seed, dur)
	const settleFor = 5 * time.Minute // every run ending (settle's timeout)
	if dl, ok := t.Deadline(); ok && time.Until(dl) < dur+settleFor+time.Minute {
		t.Fatalf("-timeout leaves %s; the nemesis needs %s plus %s to settle and check: raise -timeout",
			time.Until(dl).Round(time.Second), dur, settleFor+time.Minute)
	}
	logs, err := os.MkdirTemp("", fmt.Sprintf("jetrun-nemesis-%d-", seed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nemesis seed=%d: the processes' logs and execution logs are kept in %s", seed, logs)
			return
		}
		_ = os.RemoveAll(logs)
	})

	c := startCluster(t)
	nc, err := nats.Connect(c.url(), nats.UserInfo("admin", rolePasswords["admin"]), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.PingInterval(time.Second), nats.MaxPingsOutstanding(3))
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
	hook := newNemesisHook(t)
	fl := newFleet(t, c, logs, hook.URL)

	n := &nemesis{t: t, rng: rand.New(rand.NewPCG(seed, 1)), fleet: fl, js: js, start: time.Now()}
	ld := newLoad(t, client, engine.From(rt).Store(), rand.New(rand.NewPCG(seed, 2)), *nemesisInFlight)
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var loading sync.WaitGroup
	loading.Go(func() { ld.run(loadCtx) })
	n.run(dur)
	stopLoad()
	loading.Wait()
	t.Logf("nemesis: load stopped after %s: %d runs dispatched; waiting for every run to end", time.Since(n.start).Round(time.Second), len(ld.plans))

	st := settle(t, js, ld, settleFor)
	ld.awaiting.Wait()
	execs := readExecLogs(t, filepath.Join(logs, "exec"))
	rep := check(st, ld, hook, execs, n.faults)
	for _, f := range n.faults {
		if f.problem != "" {
			rep.violate("fault-not-healed", "%s did not heal: %s", f, f.problem)
		}
	}
	t.Log(rep.summary(n))
	// Every violation goes to report.txt beside the logs; the test's
	// output shows the first few of each check.
	var all strings.Builder
	shown := counts{}
	for _, v := range rep.violations {
		fmt.Fprintf(&all, "%s: %s\n", v.check, v.text)
		if shown[v.check]++; shown[v.check] <= 10 {
			t.Errorf("%s: %s", v.check, v.text)
		}
	}
	for check, n := range rep.byCheck() {
		if n > 10 {
			t.Errorf("%s: … and %d more (report.txt)", check, n-10)
		}
	}
	if err := os.WriteFile(filepath.Join(logs, "report.txt"), []byte(rep.summary(n)+"\n"+all.String()), 0o644); err != nil {
		t.Error(err)
	}
}

// fproc is a process of the nemesis test, its output in a log file.
type fproc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startLogged(t *testing.T, binary, logPath string, env map[string]string, args ...string) *fproc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, binary), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", binary, err)
	}
	p := &fproc{name: filepath.Base(logPath), log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *fproc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *fproc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// ready waits until the log has a line containing s.
func (p *fproc) ready(s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(p.log)
		if strings.Contains(string(b), s) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before logging %q: %s", p.name, s, tail(b, 2000))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not log %q within %s: %s", p.name, s, timeout, tail(b, 2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// member is one process of the fleet the nemesis may hit: a node, the
// parent-worker or a child-worker. Each restart is a new generation (a
// worker gets a new id, as a restarted host would).
type member struct {
	name  string
	kind  string // "node", "parent-worker", "child-worker"
	ready string // the log line that says it serves
	gen   int
	start func(gen int) *fproc
	// node is the first generation of a node (startCluster's), whose
	// output stays in memory; cur is every later generation.
	node *proc
	cur  *fproc
}

func (m *member) signal(sig syscall.Signal) error {
	if m.cur != nil {
		return m.cur.signal(sig)
	}
	return m.node.cmd.Process.Signal(sig)
}

func (m *member) kill() {
	if m.cur != nil {
		m.cur.kill()
		return
	}
	m.node.kill()
}

// restart starts the member's next generation and waits until it serves.
func (m *member) restart() error {
	m.gen++
	m.cur = m.start(m.gen)
	return m.cur.ready(m.ready, 2*time.Minute)
}

// fleet is every process of the test: three nodes, one parent-worker, two
// child-workers serving demo and two nemesisworkers.
type fleet struct {
	t       *testing.T
	members []*member
}

func newFleet(t *testing.T, c *cluster, logs, hookURL string) *fleet {
	t.Helper()
	if err := os.Mkdir(filepath.Join(logs, "exec"), 0o755); err != nil {
		t.Fatal(err)
	}
	fl := &fleet{t: t}
	for i := range 3 {
		conf := c.confs[i]
		fl.members = append(fl.members, &member{name: c.names[i], kind: "node", ready: "Server is ready", node: c.nodes[i],
			start: func(gen int) *fproc {
				return startLogged(t, "nats-server", filepath.Join(logs, fmt.Sprintf("%s.g%d.log", c.names[i], gen)), nil, "-c", conf)
			}})
	}
	common := map[string]string{"JETRUN_REPLICAS": "3", "JETRUN_LOG_LEVEL": "info", "JETRUN_LEASE": nemesisLease.String()}
	worker := func(name, kind, binary, role, ready string, extra map[string]string) *member {
		m := &member{name: name, kind: kind, ready: ready, start: func(gen int) *fproc {
			env := mergeAll(common, roleEnv(c.url(), role), extra, map[string]string{
				"JETRUN_WORKER_ID": fmt.Sprintf("%s-g%d", name, gen),
				"NEMESIS_EXEC_LOG": filepath.Join(logs, "exec", fmt.Sprintf("%s.g%d", name, gen)),
			})
			return startLogged(t, binary, filepath.Join(logs, fmt.Sprintf("%s.g%d.log", name, gen)), env)
		}}
		if err := m.restart(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	fl.members = append(fl.members,
		worker("pw", "parent-worker", "parent-worker", "parent", "parent-worker ready", map[string]string{
			"JETRUN_HTTP_ADDR":          "",
			"JETRUN_FINISH_WEBHOOKS":    "hook=" + hookURL,
			"JETRUN_RECONCILE_INTERVAL": "500ms",
			"JETRUN_FINISH_TIMEOUT":     "2s",
			"JETRUN_FINISH_RETRY_DELAY": "100ms",
		}),
		worker("child-1", "child-worker", "child-worker", "child-nesting", "child-worker serving", nil),
		worker("child-2", "child-worker", "child-worker", "child-nesting", "child-worker serving", nil),
		worker("nm-1", "child-worker", "nemesisworker", "child-nesting", "nemesisworker serving", nil),
		worker("nm-2", "child-worker", "nemesisworker", "child-nesting", "nemesisworker serving", nil),
	)
	return fl
}

func (fl *fleet) of(kinds ...string) []*member {
	var out []*member
	for _, m := range fl.members {
		if slices.Contains(kinds, m.kind) {
			out = append(out, m)
		}
	}
	return out
}

// fault is one fault of the schedule, with when it began and ended.
type fault struct {
	n       int
	kind    string // node-kill, worker-kill, parent-kill, pause, consumer-delete
	target  string
	hold    time.Duration
	began   time.Time
	healed  time.Time
	problem string // what went wrong while healing, if anything
}

func (f fault) String() string {
	return fmt.Sprintf("fault %d: %s %s (hold %s)", f.n, f.kind, f.target, f.hold.Round(10*time.Millisecond))
}

// nemesis draws faults from its seeded source and applies them one at a
// time, each healed before the next: a node is back with every stream's
// replicas current, a process serves again.
type nemesis struct {
	t      *testing.T
	rng    *rand.Rand
	fleet  *fleet
	js     jetstream.JetStream
	start  time.Time
	faults []fault
}

// The kinds of fault and their weights.
var faultKinds = []struct {
	kind   string
	weight int
}{{"node-kill", 3}, {"worker-kill", 3}, {"parent-kill", 2}, {"pause", 3}, {"consumer-delete", 2}}

func (n *nemesis) logf(format string, args ...any) {
	now := time.Now()
	n.t.Logf("nemesis +%s (%s) "+format, append([]any{now.Sub(n.start).Round(100 * time.Millisecond), now.UTC().Format("15:04:05.0")}, args...)...)
}

// next draws the next fault. Every draw takes the same values from the
// source in the same order, so a seed always yields the same schedule.
func (n *nemesis) next() (gap time.Duration, f fault, pick uint64) {
	gap = 2*time.Second + time.Duration(n.rng.Int64N(int64(6*time.Second)))
	roll := n.rng.IntN(13)
	pick = n.rng.Uint64()
	holdFrac := n.rng.Float64()
	for _, k := range faultKinds {
		if roll < k.weight {
			f.kind = k.kind
			break
		}
		roll -= k.weight
	}
	switch f.kind {
	case "node-kill":
		f.hold = time.Second + time.Duration(holdFrac*float64(7*time.Second))
	case "worker-kill", "parent-kill":
		f.hold = time.Duration(holdFrac * float64(5*time.Second))
	case "pause":
		// Up to three leases: a worker paused longer has its runs taken
		// over, and must notice when it wakes.
		f.hold = 500*time.Millisecond + time.Duration(holdFrac*float64(3*nemesisLease))
	}
	f.n = len(n.faults) + 1
	return gap, f, pick
}

// run applies faults until dur has passed since the start.
func (n *nemesis) run(dur time.Duration) {
	for {
		gap, f, pick := n.next()
		if time.Since(n.start)+gap >= dur {
			return
		}
		time.Sleep(gap) // the schedule's pace, not a wait for a result
		n.apply(&f, pick)
		n.faults = append(n.faults, f)
	}
}

func (n *nemesis) apply(f *fault, pick uint64) {
	var m *member
	switch f.kind {
	case "node-kill":
		nodes := n.fleet.of("node")
		m = nodes[pick%uint64(len(nodes))]
	case "worker-kill":
		kids := n.fleet.of("child-worker")
		m = kids[pick%uint64(len(kids))]
	case "parent-kill":
		m = n.fleet.of("parent-worker")[0]
	case "pause":
		m = n.fleet.members[pick%uint64(len(n.fleet.members))]
	case "consumer-delete":
		f.began = time.Now()
		f.target, f.problem = n.deleteConsumer(pick)
		f.healed = time.Now()
		n.logf("%s", f)
		if f.problem != "" {
			n.logf("fault %d: %s", f.n, f.problem)
		}
		return
	}
	f.target = m.name
	f.began = time.Now()
	n.logf("%s", f)
	if f.kind == "pause" {
		if err := m.signal(syscall.SIGSTOP); err != nil {
			f.problem = "SIGSTOP: " + err.Error()
		}
		time.Sleep(f.hold)
		if err := m.signal(syscall.SIGCONT); err != nil {
			f.problem = "SIGCONT: " + err.Error()
		}
	} else {
		m.kill()
		time.Sleep(f.hold)
		if err := m.restart(); err != nil {
			f.problem = "restart: " + err.Error()
		}
	}
	if m.kind == "node" {
		if err := n.clusterHealed(2 * time.Minute); err != nil {
			f.problem = strings.TrimPrefix(f.problem+"; ", "; ") + err.Error()
		}
	}
	f.healed = time.Now()
	if f.problem != "" {
		n.logf("fault %d did not heal: %s", f.n, f.problem)
		return
	}
	n.logf("fault %d healed after %s", f.n, f.healed.Sub(f.began).Round(100*time.Millisecond))
}

// deleteConsumer deletes one of the durable consumers, as admin, picked by
// pick among them in name order.
func (n *nemesis) deleteConsumer(pick uint64) (target, problem string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var all []string
	names := n.js.StreamNames(ctx)
	for s := range names.Name() {
		st, err := n.js.Stream(ctx, s)
		if err != nil {
			return "", "stream " + s + ": " + err.Error()
		}
		for info := range st.ListConsumers(ctx).Info() {
			if info.Config.Durable != "" {
				all = append(all, s+"/"+info.Name)
			}
		}
	}
	if len(all) == 0 {
		return "", "no durable consumer found"
	}
	slices.Sort(all)
	target = all[pick%uint64(len(all))]
	stream, name, _ := strings.Cut(target, "/")
	if err := n.js.DeleteConsumer(ctx, stream, name); err != nil {
		return target, "delete: " + err.Error()
	}
	return target, ""
}

// clusterHealed waits until every stream has a leader and every replica
// is current.
func (n *nemesis) clusterHealed(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if last = n.lagging(); last == "" {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("the cluster did not heal within %s: %s", timeout, last)
}

// lagging names a stream without a leader or with a replica not current,
// "" when there is none.
func (n *nemesis) lagging() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	names := n.js.StreamNames(ctx)
	count := 0
	for s := range names.Name() {
		count++
		st, err := n.js.Stream(ctx, s)
		if err != nil {
			return s + ": " + err.Error()
		}
		info, err := st.Info(ctx)
		if err != nil {
			return s + ": " + err.Error()
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return s + ": no leader"
		}
		if len(info.Cluster.Replicas) != 2 {
			return fmt.Sprintf("%s: %d replicas besides the leader", s, len(info.Cluster.Replicas))
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return fmt.Sprintf("%s: replica %s not current", s, r.Name)
			}
		}
	}
	if err := names.Err(); err != nil {
		return "stream names: " + err.Error()
	}
	if count == 0 {
		return "no streams"
	}
	return ""
}

// counts is a histogram of names, printed in name order.
type counts map[string]int

func (c counts) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
	}
	return strings.Join(parts, ", ")
}
