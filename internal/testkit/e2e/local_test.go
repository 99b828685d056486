package e2e_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	if err := pw.wait(60 * time.Second); err == nil {
		t.Fatal("second Ctrl-C: want a non-zero exit")
	}

	again := start(t, "parent-worker", env)
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
