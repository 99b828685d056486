package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

type env struct {
	url    string
	js     jetstream.JetStream
	client *parent.Client
	store  *runstore.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	c, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	return &env{url: ns.ClientURL(), js: js, client: c, store: engine.From(rt).Store()}
}

func (e *env) childWorker(t *testing.T, id string, extra map[string]string) *proc {
	t.Helper()
	vars := map[string]string{
		"JETRUN_NATS_URL":  e.url,
		"JETRUN_WORKER_ID": id,
		"JETRUN_LEASE":     "2s",
		"JETRUN_LOG_LEVEL": "debug",
	}
	maps.Copy(vars, extra)
	p := start(t, "child-worker", vars)
	p.waitLog("child-worker serving", 60*time.Second)
	return p
}

func (e *env) dispatch(t *testing.T, id string, steps, stepMs int) {
	t.Helper()
	e.dispatchDemo(t, id, steps, stepMs, nil)
}

// dispatchDemo dispatches a demo run of steps steps, detached if det is set.
func (e *env) dispatchDemo(t *testing.T, id string, steps, stepMs int, det *events.Detached) {
	t.Helper()
	_, err := e.client.Dispatch(context.Background(), parent.Request{
		AgentType: demo.AgentType, RunID: id, Input: map[string]int{"steps": steps, "stepMs": stepMs}, Detached: det,
	})
	if err != nil {
		t.Fatal(err)
	}
}

func oneTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// Two child-worker processes with runs in flight; one is killed with -9.
// Every run still completes exactly once; the killed worker's runs are taken
// over (attempt 2) and resume after their last milestone.
func TestKilledChildWorkersRunsAreTakenOverAndResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const steps, stepMs = 30, 150

	a := e.childWorker(t, "child-a", map[string]string{"JETRUN_CONCURRENCY": "4"})
	var ofA, ofB []string
	for i := range 4 {
		id := fmt.Sprintf("k-a%d", i)
		ofA = append(ofA, id)
		e.dispatch(t, id, steps, stepMs)
	}
	for _, id := range ofA {
		jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.Worker == "child-a" })
	}
	e.childWorker(t, "child-b", map[string]string{"JETRUN_CONCURRENCY": "8"})
	for i := range 4 {
		id := fmt.Sprintf("k-b%d", i)
		ofB = append(ofB, id)
		e.dispatch(t, id, steps, stepMs)
	}
	for _, id := range ofB {
		jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.Worker == "child-b" })
	}
	// Let child-a get some way into its runs, then kill it.
	for _, id := range ofA {
		jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.Milestones >= 3 })
	}
	a.kill()
	killed := time.Now()

	for _, id := range ofA {
		jetruntest.WaitRow(t, e.store, id, 60*time.Second, func(r *model.Row) bool { return r.Attempt == 2 })
	}
	t.Logf("all of child-a's runs taken over %s after kill -9 (lease 2s)", time.Since(killed).Round(10*time.Millisecond))

	for _, id := range append(slices.Clone(ofA), ofB...) {
		row := jetruntest.WaitRow(t, e.store, id, 90*time.Second, jetruntest.Final)
		if row.Status != events.StatusCompleted {
			t.Fatalf("%s: %s %s", id, row.Status, row.Error)
		}
		var out demo.Output
		if err := json.Unmarshal(row.Output, &out); err != nil {
			t.Fatal(err)
		}
		evs := waitFinalEvent(t, e.js, id)
		statuses := jetruntest.Statuses(evs)
		wantAttempt, wantStatuses := 1, "[running completed]"
		if slices.Contains(ofA, id) {
			wantAttempt, wantStatuses = 2, "[running running completed]"
			if out.StepsRunHere >= steps {
				t.Errorf("%s: attempt 2 ran all %d steps; it should resume after the milestones", id, steps)
			}
		}
		if row.Attempt != wantAttempt || fmt.Sprint(statuses) != wantStatuses {
			t.Errorf("%s: attempt %d statuses %v; want attempt %d, %s", id, row.Attempt, statuses, wantAttempt, wantStatuses)
		}
		if got := jetruntest.MilestoneSeqs(evs); !slices.Equal(got, oneTo(steps)) {
			t.Errorf("%s: milestone sequences %v, want 1..%d once each", id, got, steps)
		}
	}
}

// A child-worker killed with -9 just after it renewed its liveness key: each
// of its runs is taken over one lease after that renewal, not two. Its
// runs began at different moments, so before the fix some of their
// InProgress beats went out before the renewal; their dispatches came
// back while the key still lived and another worker then handed them back
// for a whole lease (takeovers about 1.8 leases after the renewal; the
// issue saw 27 s with the default 15 s lease). Times are the server's
// (the key's write) and the taker's (its running event), on one host.
func TestKilledWorkersRunsAreTakenOverOneLeaseAfterItsLastRenewal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lease = 4 * time.Second
	cfg := map[string]string{"JETRUN_LEASE": lease.String(), "JETRUN_CONCURRENCY": "8"}
	a := e.childWorker(t, "child-r1", cfg)
	// Each run begins once the one before reached its first milestone:
	// their beginnings spread over more than a renewal period.
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("renewed-%d", i)
		ids = append(ids, id)
		e.dispatch(t, id, 10000, 400)
		jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool {
			return r.Worker == "child-r1" && r.Milestones >= 1
		})
	}
	e.childWorker(t, "child-r2", cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	active, err := e.js.KeyValue(ctx, wire.Namespace("").ActiveBucket())
	if err != nil {
		t.Fatal(err)
	}
	w, err := active.Watch(ctx, "worker.child-r1", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var renewal jetstream.KeyValueEntry
	for renewal == nil {
		select {
		case en := <-w.Updates():
			if en != nil && en.Operation() == jetstream.KeyValuePut {
				renewal = en
			}
		case <-ctx.Done():
			t.Fatal("child-r1 did not renew its liveness key")
		}
	}
	a.kill()
	killed := time.Now()

	for _, id := range ids {
		jetruntest.WaitRow(t, e.store, id, 10*lease, func(r *model.Row) bool { return r.Attempt == 2 })
	}
	select {
	case en := <-w.Updates():
		if en != nil && en.Operation() == jetstream.KeyValuePut {
			t.Fatalf("child-r1's key was written after the renewal it was killed at: revision %d", en.Revision())
		}
	default:
	}
	for _, id := range ids {
		var took time.Time
		for _, ev := range jetruntest.ReadEvents(t, e.js, id) {
			if ev.Status != nil && ev.Status.Status == events.StatusRunning && ev.Status.Attempt == 2 {
				took = ev.Status.At
			}
		}
		if took.IsZero() {
			t.Fatalf("%s: no running event of attempt 2", id)
		}
		after := took.Sub(renewal.Created())
		t.Logf("%s taken over %.2f leases after the last renewal, %.2f after the kill", id,
			after.Seconds()/lease.Seconds(), took.Sub(killed).Seconds()/lease.Seconds())
		if after >= lease+lease/2 {
			t.Errorf("%s: taken over %.2f leases after its holder's last renewal; want about one (under 1.5)",
				id, after.Seconds()/lease.Seconds())
		}
	}
}

// An exec agent's command dies with its worker: a child-worker killed
// with -9 cannot stop it, and before the fix it went on working (issue 35:
// it started its next step 0.2 s after the worker died) beside the run's
// next attempt. The command here writes nothing to stdout while it works,
// so no broken pipe stops it either.
func TestExecCommandDiesWithItsKilledWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "steps.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
echo $$ > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid"
while :; do echo step >> "$1/steps"; sleep 0.1; done
`), 0o755); err != nil {
		t.Fatal(err)
	}
	a := e.childWorker(t, "child-x1", map[string]string{"JETRUN_EXEC_AGENTS": "stepper=/bin/sh " + script + " " + dir})
	e.dispatchInput(t, "stepper", "exec-orphan", map[string]any{})
	var pid int
	natstest.Eventually(t, 30*time.Second, func() bool {
		raw, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err == nil
	}, "the command did not start")
	if !processRuns(pid) {
		t.Fatalf("the command (pid %d) is not running", pid)
	}
	a.kill()
	natstest.Eventually(t, 30*time.Second, func() bool { return !processRuns(pid) },
		"the command (pid %d) still runs after its worker was killed with -9", pid)
}

// A parent process killed with -9 while awaiting Run; a new process calls
// Run with the same run id and gets the real result, without a second
// execution.
func TestKilledParentReattachesWithTheSameRunID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "child-p", nil)
	const id = "await-me"
	input := `{"steps":15,"stepMs":200}`

	first := start(t, "awaiter", nil, e.url, id, input)
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.Milestones >= 2 })
	first.kill()
	if row, _, err := e.store.Get(context.Background(), id); err != nil || row.Status != events.StatusRunning || row.CancelRequested {
		t.Fatalf("after the parent died the run must go on: %+v %v", row, err)
	}

	second := start(t, "awaiter", nil, e.url, id, input)
	if err := second.wait(60 * time.Second); err != nil {
		t.Fatalf("second awaiter: %v\nstdout: %s\nstderr: %s", err, second.stdout, second.stderr)
	}
	var got struct {
		OK      bool        `json:"ok"`
		Summary string      `json:"summary"`
		Output  demo.Output `json:"output"`
	}
	if err := json.Unmarshal([]byte(second.stdout.String()), &got); err != nil {
		t.Fatalf("awaiter output %q: %v", second.stdout, err)
	}
	if !got.OK || got.Summary != "finished 15 steps" || got.Output.Attempt != 1 || got.Output.StepsRunHere != 15 {
		t.Fatalf("second awaiter got %+v", got)
	}
	evs := waitFinalEvent(t, e.js, id)
	if s := fmt.Sprint(jetruntest.Statuses(evs)); s != "[running completed]" {
		t.Fatalf("statuses %s: the run executed more than once", s)
	}
	if got := jetruntest.MilestoneSeqs(evs); !slices.Equal(got, oneTo(15)) {
		t.Fatalf("milestones %v", got)
	}
}

// SIGTERM: the worker stops pulling and, when its shutdown timeout passes,
// hands its runs back so another worker takes them at once (not after the
// lease). A second SIGTERM makes a worker exit without waiting.
func TestSigtermHandsRunsBackAndASecondSignalExits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := map[string]string{"JETRUN_LEASE": "5m", "JETRUN_SHUTDOWN_TIMEOUT": "300ms"}
	a := e.childWorker(t, "child-t1", long)
	e.dispatch(t, "term", 40, 100)
	jetruntest.WaitRow(t, e.store, "term", 30*time.Second, func(r *model.Row) bool { return r.Milestones >= 3 })
	b := e.childWorker(t, "child-t2", long)

	a.signal(syscall.SIGTERM)
	if err := a.wait(30 * time.Second); err != nil {
		t.Fatalf("child-t1 exit after SIGTERM: %v\n%s", err, a.stderr)
	}
	row := jetruntest.WaitRow(t, e.store, "term", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || row.Handoffs != 1 || row.Worker != "" {
		t.Fatalf("row after hand-back: %+v", row)
	}

	// An idle worker exits at once on SIGTERM.
	b.signal(syscall.SIGTERM)
	if err := b.wait(30 * time.Second); err != nil {
		t.Fatalf("idle child-t2 exit after SIGTERM: %v", err)
	}

	// A worker told to wait a long time for its run exits on the second signal.
	holder := e.childWorker(t, "child-t3", map[string]string{"JETRUN_SHUTDOWN_TIMEOUT": "10m"})
	e.dispatch(t, "term2", 1000, 100)
	jetruntest.WaitRow(t, e.store, "term2", 30*time.Second, func(r *model.Row) bool {
		return r.Worker == "child-t3" && r.Milestones >= 1
	})
	holder.signal(syscall.SIGTERM)
	holder.waitLog("shutting down", 10*time.Second)
	if holder.exited() {
		t.Fatal("child-t3 exited at the first signal while a run was in flight")
	}
	holder.signal(syscall.SIGTERM)
	err := holder.wait(10 * time.Second)
	if err == nil {
		t.Fatal("second SIGTERM: want a non-zero exit")
	}
}

func waitFinalEvent(t *testing.T, js jetstream.JetStream, id string) []jetruntest.Event {
	t.Helper()
	var evs []jetruntest.Event
	natstest.Eventually(t, 10*time.Second, func() bool {
		evs = jetruntest.ReadEvents(t, js, id)
		st := jetruntest.Statuses(evs)
		return len(st) > 0 && st[len(st)-1].Final()
	}, "run %s has no final status event", id)
	return evs
}

// A signal sent while the waiting run's worker is dead, before another
// worker took the run over, is not lost: the new attempt receives it.
func TestSignalSentWhileTheWorkerIsReplacedArrives(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.childWorker(t, "child-s1", nil)
	if _, err := e.client.Dispatch(context.Background(), parent.Request{
		AgentType: demo.AgentType, RunID: "parked", Input: map[string]int{"steps": 3, "stepMs": 100, "approveAt": 2},
	}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, e.store, "parked", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == demo.ApprovalSignal })
	a.kill()
	if _, err := e.client.Signal(context.Background(), "parked", demo.ApprovalSignal, map[string]bool{"approved": true}); err != nil {
		t.Fatal(err)
	}
	e.childWorker(t, "child-s2", nil)
	row := jetruntest.WaitRow(t, e.store, "parked", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || row.Worker != "" {
		t.Fatalf("row: %+v", row)
	}
	var out demo.Output
	if err := json.Unmarshal(row.Output, &out); err != nil || out.StepsRunHere != 2 {
		t.Fatalf("output %s: the new attempt should have run steps 2 and 3 only", row.Output)
	}
}

// A parent killed with -9 while awaiting a run no worker serves; the next
// parent gives up after its no-progress window with the soft failure (the
// run stays queued, untouched); once a worker exists, a third parent
// re-attaches to the same run id and gets its result from one execution.
func TestAwaitNoProgressAfterAKilledParentThenReattach(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gone := e.childWorker(t, "child-gone", nil) // creates the demo consumer
	gone.kill()
	const id = "quiet"
	input := `{"steps":3,"stepMs":50}`
	quick := map[string]string{"JETRUN_REATTACH_NO_PROGRESS": "1s"}

	first := start(t, "awaiter", nil, e.url, id, input)
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusStarting })
	first.kill()

	second := start(t, "awaiter", quick, e.url, id, input)
	if err := second.wait(60 * time.Second); err == nil {
		t.Fatalf("second awaiter succeeded without a worker: %s", second.stdout)
	}
	var gaveUp struct {
		OK      bool                `json:"ok"`
		Failure *jetruntype.Failure `json:"failure"`
	}
	if err := json.Unmarshal([]byte(second.stdout.String()), &gaveUp); err != nil || gaveUp.Failure == nil {
		t.Fatalf("second awaiter output %q: %v\nstderr: %s", second.stdout, err, second.stderr)
	}
	f := gaveUp.Failure
	if f.Status != events.StatusInterrupted || f.Reason != events.ReasonNoProgress || !f.ChildStillRunning || !f.Retryable {
		t.Fatalf("second awaiter's failure: %+v", f)
	}
	t.Logf("soft failure: %s", f.Message)
	if row, _, err := e.store.Get(context.Background(), id); err != nil || row.Status != events.StatusStarting {
		t.Fatalf("the run must stay queued: %+v %v", row, err)
	}

	e.childWorker(t, "child-late", nil)
	third := start(t, "awaiter", nil, e.url, id, input)
	if err := third.wait(60 * time.Second); err != nil {
		t.Fatalf("third awaiter: %v\nstdout: %s\nstderr: %s", err, third.stdout, third.stderr)
	}
	evs := waitFinalEvent(t, e.js, id)
	if s := fmt.Sprint(jetruntest.Statuses(evs)); s != "[running completed]" {
		t.Fatalf("statuses %s: want one execution", s)
	}
}
