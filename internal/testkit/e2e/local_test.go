package e2e_test

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The tests in this file run parent-worker as the README's tour does, on a
// user's machine: embedded server, data in ./data, stopped with Ctrl-C.

// Ctrl-C twice, as the README allows: the first says what the shutdown
// waits for and how long, the second stops it at once, and the embedded
// server's store is closed cleanly, so the next start recovers nothing
// (no nats-server warnings about msg blocks, stream state or TTL state).
func TestParentWorkerSecondCtrlCClosesTheStoreCleanly(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	env := map[string]string{
		"JETRUN_DATA_DIR": data, "JETRUN_EMBEDDED_PORT": "-1", "JETRUN_HTTP_ADDR": addr, "JETRUN_CHILDREN": "demo",
	}
	pw := start(t, "parent-worker", env)
	pw.waitLog("parent-worker ready", 60*time.Second)
	api := newAPIClient(t, "http://"+addr)
	for i := range 5 { // runs in flight, writing events, at both signals
		api.dispatch(fmt.Sprintf("long-%d", i), nil, map[string]int{"steps": 1000, "stepMs": 50})
	}
	api.waitList("status=running", 5, func(s runSummary) bool { return s.Status == "running" })
	pw.signal(syscall.SIGINT)
	pw.waitLog("a second signal stops at once", 30*time.Second)
	pw.waitLog("shutting down: waiting for", 30*time.Second)
	say := regexp.MustCompile(`shutting down: waiting for [^"]*runs in flight[^"]*".* runs_in_flight=\d+ runs_timeout=30s`)
	if !say.MatchString(pw.stderr.String()) {
		t.Fatalf("the first Ctrl-C does not say what it waits for and how long:\n%s", pw.stderr)
	}
	pw.signal(syscall.SIGINT)
	var exit *exec.ExitError
	if err := pw.wait(60 * time.Second); !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("second Ctrl-C: exit %v; want 130 (128 + SIGINT)", err)
	}

	// The runs handed back are taken up again at once: let SIGTERM hand
	// them back without waiting the default 30 s.
	quick := maps.Clone(env)
	quick["JETRUN_SHUTDOWN_TIMEOUT"] = "1s"
	again := start(t, "parent-worker", quick)
	again.waitLog("parent-worker ready", 60*time.Second)
	again.signal(syscall.SIGTERM)
	if err := again.wait(60 * time.Second); err != nil {
		t.Fatalf("restarted parent-worker exit after SIGTERM: %v", err)
	}
	for _, l := range strings.Split(again.stderr.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "component=nats-server") {
			t.Errorf("the start after a second Ctrl-C warns: %s", l)
		}
	}
}

// With the embedded server on a random port (4222 busy), child-worker and
// the jetrun CLI started with no JETRUN_NATS_URL from the directory
// parent-worker runs in find it through ./data/nats-url, and the banner
// says how to reach it from elsewhere.
func TestChildWorkerAndCLIFindTheLocalServerOffTheDefaultPort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := startIn(t, dir, "parent-worker", map[string]string{"JETRUN_EMBEDDED_PORT": "-1", "JETRUN_HTTP_ADDR": ""})
	pw.waitLog("parent-worker ready", 60*time.Second)
	var url string
	natstest.Eventually(t, 10*time.Second, func() bool {
		if m := regexp.MustCompile(`NATS\s+(nats://\S+)`).FindStringSubmatch(pw.stdout.String()); m != nil {
			url = m[1]
		}
		return url != ""
	}, "banner has no NATS URL:\n%s", pw.stdout)
	if want := "export JETRUN_NATS_URL=" + url; !strings.Contains(pw.stdout.String(), want) {
		t.Errorf("banner lacks %q:\n%s", want, pw.stdout)
	}

	cw := startIn(t, dir, "child-worker", map[string]string{"JETRUN_WORKER_ID": "local-child"})
	cw.waitLog("child-worker serving", 60*time.Second)
	if !strings.Contains(cw.stderr.String(), "nats="+url) {
		t.Fatalf("child-worker did not connect to %s:\n%s", url, cw.stderr)
	}
	cli := exec.Command(filepath.Join(bin, "jetrun"), "dispatch", "--wait", "--run-id", "local-1", "demo", `{"steps":2,"stepMs":10}`)
	cli.Dir, cli.Env = dir, []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	out, err := cli.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "completed") {
		t.Fatalf("jetrun dispatch --wait from %s: %v\n%s", dir, err, out)
	}

	// Stopped, parent-worker removes the file: nothing points at a dead server.
	pw.signal(syscall.SIGTERM)
	if err := pw.wait(60 * time.Second); err != nil {
		t.Fatalf("parent-worker exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "nats-url")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("data/nats-url after parent-worker stopped: %v", err)
	}
	cw.signal(syscall.SIGTERM)
	_ = cw.wait(60 * time.Second)
}

// Two parent-workers on one data directory would open one embedded store
// twice (issue 35: the next start reported "corrupt record state", a
// completed run ran again from step 1, another was lost). A second
// parent-worker started while the first runs, or while the first is still
// in its graceful stop, refuses to start, saying why, before it opens the
// store; once the first has exited, the directory is free again and what
// the first stored is intact.
func TestASecondParentWorkerOnTheSameDataDirRefusesToStart(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	env := map[string]string{
		"JETRUN_DATA_DIR": data, "JETRUN_EMBEDDED_PORT": "-1", "JETRUN_HTTP_ADDR": addr, "JETRUN_CHILDREN": "demo",
		"JETRUN_SHUTDOWN_TIMEOUT": "5m",
	}
	first := start(t, "parent-worker", env)
	first.waitLog("parent-worker ready", 60*time.Second)
	api := newAPIClient(t, "http://"+addr)
	api.dispatch("done-before", nil, map[string]int{"steps": 2, "stepMs": 10})
	api.waitRun("done-before", "to complete", func(s runSummary) bool { return s.Status == "completed" })
	api.dispatch("in-flight", nil, map[string]int{"steps": 1000, "stepMs": 50})
	api.waitRun("in-flight", "to run", func(s runSummary) bool { return s.Status == "running" })

	// refused starts a second parent-worker on data (another HTTP address)
	// and checks it exits at once, saying why, without opening the store.
	refused := func(when string) {
		t.Helper()
		other := maps.Clone(env)
		other["JETRUN_HTTP_ADDR"] = fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
		second := start(t, "parent-worker", other)
		if err := second.wait(60 * time.Second); err == nil {
			t.Fatalf("%s: a second parent-worker on the same data directory exited 0", when)
		}
		errOut := second.stderr.String()
		for _, want := range []string{"data directory in use", data, fmt.Sprintf("process %d", first.cmd.Process.Pid), "JETRUN_DATA_DIR"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: the refusal does not say %q:\n%s", when, want, errOut)
			}
		}
		if strings.Contains(errOut, "component=nats-server") || strings.Contains(errOut, "parent-worker ready") {
			t.Errorf("%s: the second parent-worker started a server on the store:\n%s", when, errOut)
		}
	}
	refused("while the first runs")

	first.signal(syscall.SIGINT)
	first.waitLog("shutting down: waiting for", 30*time.Second)
	refused("while the first is stopping")
	first.signal(syscall.SIGINT) // stop now: the run in flight is handed back
	_ = first.wait(60 * time.Second)

	again := start(t, "parent-worker", env)
	again.waitLog("parent-worker ready", 60*time.Second)
	var row struct {
		Status  string `json:"status"`
		Attempt int    `json:"attempt"`
	}
	api.call("GET", "/v1/runs/done-before", nil, &row)
	if row.Status != "completed" || row.Attempt != 1 {
		t.Fatalf("done-before after the restart: %+v; want completed at attempt 1", row)
	}
	again.signal(syscall.SIGINT)
	again.signal(syscall.SIGINT)
	_ = again.wait(60 * time.Second)
}

// A busy HTTP address fails the start before the embedded server opens the
// store, and the error names the setting to change.
func TestParentWorkerOnABusyHTTPAddressNamesTheSettingBeforeOpeningTheStore(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	data := filepath.Join(t.TempDir(), "data")
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_DATA_DIR": data, "JETRUN_EMBEDDED_PORT": "-1", "JETRUN_HTTP_ADDR": busy.Addr().String(),
	})
	if err := pw.wait(60 * time.Second); err == nil {
		t.Fatal("parent-worker on a busy HTTP address exited 0")
	}
	if errOut := pw.stderr.String(); !strings.Contains(errOut, "JETRUN_HTTP_ADDR") || !strings.Contains(errOut, busy.Addr().String()) {
		t.Errorf("the error does not name JETRUN_HTTP_ADDR and the address:\n%s", errOut)
	}
	if _, err := os.Stat(filepath.Join(data, "jetstream")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the store was opened before the HTTP address was checked: %s/jetstream: %v", data, err)
	}
}

// Runs in flight when parent-worker is stopped with Ctrl-C are handed back,
// and the next start takes them up at once. The hand-back was a plain Nak,
// which the embedded server, stopping right after, did not keep: the next
// start got the dispatches only when their AckWait (the lease) ran out
// (7–13 s after it was ready in the issue). The lease here is longer than
// the test may take, once with one Ctrl-C and once with two.
func TestRunsHandedBackByCtrlCResumeAtTheNextStart(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	env := map[string]string{
		"JETRUN_DATA_DIR": t.TempDir(), "JETRUN_EMBEDDED_PORT": "-1", "JETRUN_HTTP_ADDR": addr, "JETRUN_CHILDREN": "demo",
		"JETRUN_LEASE": "10m", "JETRUN_SHUTDOWN_TIMEOUT": "3s",
	}
	api := newAPIClient(t, "http://"+addr)
	ids := []string{"back-0", "back-1", "back-2"}
	type row struct {
		Status   string `json:"status"`
		Attempt  int    `json:"attempt"`
		Worker   string `json:"worker"`
		Handoffs int    `json:"handoffs"`
	}
	pw := start(t, "parent-worker", env)
	pw.waitLog("parent-worker ready", 60*time.Second)
	for _, id := range ids {
		api.dispatch(id, nil, map[string]int{"steps": 100000, "stepMs": 50})
	}
	for attempt, ctrlC := range []int{1, 2} {
		for _, id := range ids {
			var r row
			natstest.Eventually(t, 60*time.Second, func() bool {
				api.call("GET", "/v1/runs/"+id, nil, &r)
				return r.Status == "running" && r.Worker != "" && r.Attempt == attempt+1
			}, "%s is not running its attempt %d: %+v", id, attempt+1, &r)
		}
		pw.signal(syscall.SIGINT)
		if ctrlC == 2 {
			pw.waitLog("a second signal stops at once", 30*time.Second)
			pw.signal(syscall.SIGINT)
			pw.waitLog("second interrupt: stopping now", 30*time.Second)
		}
		pw.waitLog("handed back", 30*time.Second)
		_ = pw.wait(60 * time.Second)
		pw = start(t, "parent-worker", env)
		pw.waitLog("parent-worker ready", 60*time.Second)
	}
	for _, id := range ids {
		var r row
		natstest.Eventually(t, 60*time.Second, func() bool {
			api.call("GET", "/v1/runs/"+id, nil, &r)
			return r.Status == "running" && r.Worker != "" && r.Attempt == 3
		}, "%s was not taken up again after two hand-backs (the lease is 10m): %+v", id, &r)
		if r.Handoffs != 2 {
			t.Errorf("%s: %d hand-offs, want 2", id, r.Handoffs)
		}
	}
}

// JETRUN_DEMO_RUNS (make run's fan-out) does not add its runs again at each
// start on the same store: the demo runs have stable ids, and a restart
// re-attaches to them (before, each restart added five more).
func TestDemoFanOutIsNotAddedAgainAtARestart(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	env := map[string]string{
		"JETRUN_DATA_DIR": t.TempDir(), "JETRUN_EMBEDDED_PORT": "-1", "JETRUN_HTTP_ADDR": addr, "JETRUN_CHILDREN": "demo",
		"JETRUN_DEMO_RUNS": "3",
	}
	api := newAPIClient(t, "http://"+addr)
	for n := range 2 {
		pw := start(t, "parent-worker", env)
		pw.waitOut("demo fan-out done", 2*time.Minute)
		if n == 1 && !strings.Contains(pw.stdout.String(), "3 from an earlier start: not dispatched again") {
			t.Errorf("the restart does not say the demo runs were there:\n%s", pw.stdout)
		}
		runs := api.list("").Runs
		if ids := idsOf(runs); len(ids) != 3 || slices.ContainsFunc(runs, func(s runSummary) bool { return s.Status != "completed" }) {
			t.Fatalf("start %d: runs %+v; want the 3 demo runs, completed", n+1, runs)
		}
		pw.signal(syscall.SIGTERM)
		if err := pw.wait(60 * time.Second); err != nil {
			t.Fatalf("parent-worker exit after SIGTERM: %v", err)
		}
	}
}
