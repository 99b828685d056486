package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// The tests in this file run the Python library (sdk/python, issue 39):
// its unit tests, which read the shared protocol fixtures, and its caller
// side against a real parent-worker. Its child side runs under real
// workers in the Python example tests (lang_test.go, step_test.go,
// stepusage_test.go, usage_test.go): the examples use it.

// sdkPython is the Python library's directory.
func sdkPython(t *testing.T) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "..", "..", "sdk", "python"))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// The library's own tests: every fixture of docs/protocol/fixtures played
// through its verbs, serve's outcomes, what it refuses to write, the http
// server, and the client's SSE resume and request shapes.
func TestPythonSDKUnitTests(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(python3(t), "-m", "unittest", "discover", "-v", "-s", "tests")
	cmd.Dir = sdkPython(t)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PYTHONPATH=" + sdkPython(t),
		"PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "test_every_fixture_attempt") || !strings.Contains(string(out), "\nOK") {
		t.Fatalf("the fixture test did not run:\n%s", out)
	}
}

// The Python caller (jetrun.Client) against a real parent-worker's HTTP
// API: dispatch (twice, one run), stream with a resume by Last-Event-ID,
// await, run, signal, cancel, a failure, an unknown run; the Python child's
// step, usage, chunk, progress, calls, milestone, and its retryable and
// plain failures. What Python saw is what jetrun stored.
func TestPythonCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	py := python3(t)
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_NATS_URL":  e.url,
		"JETRUN_WORKER_ID": "py-caller",
		"JETRUN_HTTP_ADDR": addr,
		"JETRUN_CHILDREN":  "demo",
		"JETRUN_DEMO_RUNS": "0",
		"JETRUN_EXEC_AGENTS": "agent-py=" + py + " " + examples(t, "python", "agent.py") + ",wordcount=" + py + " " + examples(t, "python", "wordcount.py") +
			",py-child=" + py + " " + filepath.Join(sdkPython(t), "tests", "live_child.py"),
		"PYTHONPATH":       sdkPython(t),
		"JETRUN_LOG_LEVEL": "debug",
	})
	pw.waitLog("parent-worker ready", 60*time.Second)

	caller := startProgram(t, py, map[string]string{"PYTHONPATH": sdkPython(t), "PYTHONDONTWRITEBYTECODE": "1"},
		filepath.Join(sdkPython(t), "tests", "live_caller.py"), "http://"+addr)
	if err := caller.wait(180 * time.Second); err != nil {
		t.Fatalf("live_caller.py: %v\n%s%s", err, caller.stdout, caller.stderr)
	}
	said := make(map[string]map[string]any)
	sc := bufio.NewScanner(strings.NewReader(caller.stdout.String()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("live_caller.py printed a non-JSON line %q", sc.Text())
		}
		said[l["what"].(string)] = l
	}
	for _, w := range []string{"dispatched", "streamed", "awaited", "ran", "signalled", "cancelled", "failed", "called", "refused", "missing"} {
		if said[w] == nil {
			t.Fatalf("live_caller.py did not say %q:\n%s", w, caller.stdout)
		}
	}
	if d := said["dispatched"]; d["id"] != "py-c-steps" || d["againId"] != "py-c-steps" {
		t.Errorf("dispatched %v", d)
	}

	// The stream, hung up after three events and resumed by Last-Event-ID:
	// every stored event once, in order, no gap, no duplicate.
	s := said["streamed"]
	var seqs []uint64
	for _, id := range s["ids"].([]any) {
		seq, _, _ := strings.Cut(id.(string), ".")
		n, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			t.Fatalf("event id %v", id)
		}
		if len(seqs) == 0 || seqs[len(seqs)-1] != n {
			seqs = append(seqs, n)
		}
	}
	ids := s["ids"].([]any)
	if len(slices.Compact(slices.Clone(ids))) != len(ids) || s["firstPart"].(float64) != 3 {
		t.Errorf("event ids %v: duplicates, or the first connection did not hang up after 3", ids)
	}
	evs := waitFinalEvent(t, e.js, "py-c-steps")
	var stored []uint64
	for _, ev := range evs {
		stored = append(stored, ev.Seq)
	}
	if !slices.Equal(seqs, stored) {
		t.Errorf("Python streamed sequences %v; stored %v", seqs, stored)
	}
	if got := fmt.Sprint(s["steps"]); got != "[think-1 think-2 think-3]" {
		t.Errorf("streamed steps %s", got)
	}
	if kinds := s["kinds"].([]any); kinds[len(kinds)-1] != "end" {
		t.Errorf("the stream did not end with end: %v", kinds)
	}

	row := jetruntest.WaitRow(t, e.store, "py-c-steps", 10*time.Second, jetruntest.Final)
	if a := said["awaited"]; a["status"] != "completed" || a["summary"] != row.Summary || row.Summary != "answered in 3 turns" {
		t.Errorf("awaited %v; row %s %q", a, row.Status, row.Summary)
	}
	if r := said["ran"]; r["status"] != "completed" || r["summary"] != "5 words in 2 lines" || fmt.Sprint(r["output"]) != "map[lines:2 words:5]" {
		t.Errorf("ran %v", r)
	}
	row = jetruntest.WaitRow(t, e.store, "py-c-wait", 10*time.Second, jetruntest.Final)
	if sg := said["signalled"]; sg["status"] != "completed" || row.Status != events.StatusCompleted || sg["summary"] != row.Summary {
		t.Errorf("signalled %v; row %s %q", sg, row.Status, row.Summary)
	}
	row = jetruntest.WaitRow(t, e.store, "py-c-cancel", 10*time.Second, jetruntest.Final)
	if c := said["cancelled"]; c["raised"] != true || c["status"] != "aborted" || c["error"] != row.Error || row.Error != "cancelled: enough" {
		t.Errorf("cancelled %v; row %s %q", c, row.Status, row.Error)
	}
	row = jetruntest.WaitRow(t, e.store, "py-c-fail", 10*time.Second, jetruntest.Final)
	if f := said["failed"]; f["raised"] != true || f["status"] != "error" || f["error"] != row.Error || !strings.Contains(row.Error, "exit status 2") {
		t.Errorf("failed %v; row %s %q", f, row.Status, row.Error)
	}
	// The Python child on the library: retried once (its step kept, its
	// usage counted once), then its two calls answered through reply.
	row = jetruntest.WaitRow(t, e.store, "py-c-calls", 10*time.Second, jetruntest.Final)
	c := said["called"]
	out, _ := json.Marshal(c["output"])
	if c["status"] != "completed" || c["attempt"] != float64(2) || row.Attempt != 2 || c["summary"] != "answer: blue" ||
		string(out) != `{"answer":"blue","attempt":2,"second":"error: no idea"}` {
		t.Errorf("called %v; row %s attempt %d (%s)", c, row.Status, row.Attempt, row.Error)
	}
	if got := fmt.Sprint(c["calls"]); got != "[[1 answered map[question:colour?]] [2 failed map[question:and then?]]]" {
		t.Errorf("calls %s", got)
	}
	evs = waitFinalEvent(t, e.js, "py-c-calls")
	if got := storedSteps(evs); !slices.Equal(got, []string{"plan@1"}) {
		t.Errorf("stored steps %v", got)
	}
	if row.Usage == nil || row.Usage.InputTokens != 10 || row.Usage.OutputTokens != 2 {
		t.Errorf("usage %+v; want the step's once", row.Usage)
	}
	if got := milestoneNames(evs); !slices.Equal(got, []string{"answered"}) {
		t.Errorf("milestones %v", got)
	}
	if got := chunkText(evs); !slices.Equal(got, []string{"planned\n", "planned\n"}) {
		t.Errorf("chunks %q; want run.chunk's, once per attempt", got)
	}
	var progress []string
	for _, ev := range evs {
		if p := ev.Progress; p != nil {
			progress = append(progress, fmt.Sprintf("%g %s", p.Fraction, p.Phase))
		}
	}
	if len(progress) == 0 || progress[len(progress)-1] != "0.5 asking" {
		t.Errorf("progress %q; want run.progress's last", progress)
	}
	// run.fail(..., retryable=False): the run ends error after one attempt.
	row = jetruntest.WaitRow(t, e.store, "py-c-refuse", 10*time.Second, jetruntest.Final)
	if r := said["refused"]; r["raised"] != true || r["status"] != "error" || r["error"] != "no question given" ||
		r["attempt"] != float64(1) || row.Attempt != 1 || row.Error != "no question given" {
		t.Errorf("refused %v; row %s attempt %d %q", r, row.Status, row.Attempt, row.Error)
	}
	if m := said["missing"]; m["status"] != float64(404) {
		t.Errorf("missing %v", m)
	}
}

// readmePythonChild returns the README's ten-line Python child: its first
// python code block.
func readmePythonChild(t *testing.T) string {
	t.Helper()
	text := readme(t)
	_, rest, ok := strings.Cut(text, "A ten-line child")
	if ok {
		_, rest, ok = strings.Cut(rest, "```python\n")
	}
	code, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("README has no ten-line Python child")
	}
	if n := strings.Count(strings.TrimSpace(code), "\n") + 1; n > 12 {
		t.Fatalf("the README's ten-line Python child has %d lines", n)
	}
	return code
}

// The README's ten-line Python child works as written, served by a real
// child-worker through the exec type: its step is stored, it waits for
// the approval, and the run completes with its result.
func TestReadmePythonTenLineChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := filepath.Join(t.TempDir(), "wc.py")
	if err := os.WriteFile(path, []byte(readmePythonChild(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.childWorker(t, "py-ten", map[string]string{"JETRUN_EXEC_AGENTS": "wc=" + python3(t) + " " + path, "PYTHONPATH": sdkPython(t)})
	e.dispatchInput(t, "wc", "py-ten-1", map[string]any{"text": "b a b c", "approval": true})
	jetruntest.WaitRow(t, e.store, "py-ten-1", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" || r.Status.Final() })
	if _, err := e.client.Signal(context.Background(), "py-ten-1", "approve", map[string]bool{"approved": true}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "py-ten-1", 30*time.Second, jetruntest.Final)
	var counts map[string]int
	_ = json.Unmarshal(row.Output, &counts)
	if row.Status != events.StatusCompleted || row.Summary != "most common: b" || fmt.Sprint(counts) != "map[a:1 b:2 c:1]" {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
	evs := waitFinalEvent(t, e.js, "py-ten-1")
	if got := storedSteps(evs); !slices.Equal(got, []string{"count@1"}) {
		t.Errorf("stored steps %v", got)
	}
	if got := milestoneNames(evs); !slices.Equal(got, []string{"counted"}) {
		t.Errorf("milestones %v", got)
	}
}

// A Python caller follows a Python agent's run (both on the library)
// through a parent-worker that is killed with -9 between the agent's
// steps; another parent-worker starts on the same address. The caller's
// stream resumes by itself with Last-Event-ID: it sees every stored event
// once, in order, and its await returns the completed run. No step stored
// before the kill is paid again; the one running at the kill at most twice.
func TestPythonFollowsARunAcrossAParentWorkerKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	py := python3(t)
	parentWorker := func(id string) *proc {
		p := start(t, "parent-worker", map[string]string{
			"JETRUN_NATS_URL":           e.url,
			"JETRUN_WORKER_ID":          id,
			"JETRUN_HTTP_ADDR":          addr,
			"JETRUN_LEASE":              "2s",
			"JETRUN_RECONCILE_INTERVAL": "500ms",
			"JETRUN_EXEC_AGENTS":        "agent-py=" + py + " " + examples(t, "python", "agent.py"),
			"JETRUN_LOG_LEVEL":          "debug",
		})
		p.waitLog("parent-worker ready", 60*time.Second)
		return p
	}
	a := parentWorker("py-pw-a")

	ledger := filepath.Join(t.TempDir(), "ledger")
	const turns = 12
	input, _ := json.Marshal(map[string]any{"question": "tides", "turns": turns, "delay": 0.15, "ledger": ledger})
	caller := startProgram(t, py, map[string]string{"PYTHONPATH": sdkPython(t), "PYTHONDONTWRITEBYTECODE": "1"},
		filepath.Join(sdkPython(t), "tests", "live_follow.py"), "http://"+addr, "agent-py", "py-follow", string(input))
	followed := func() (steps []string, ids []string, final map[string]any) {
		for _, l := range caller.lines() {
			var said map[string]any
			if json.Unmarshal([]byte(l), &said) != nil {
				continue
			}
			switch said["what"] {
			case "event":
				if id, ok := said["id"].(string); ok {
					ids = append(ids, id)
				}
				if s, ok := said["step"].(string); ok {
					steps = append(steps, s)
				}
			case "final":
				final = said
			}
		}
		return steps, ids, final
	}
	natstest.Eventually(t, 60*time.Second, func() bool { s, _, _ := followed(); return len(s) >= 3 },
		"the Python caller did not see 3 steps:\n%s%s", caller.stdout, caller.stderr)
	a.kill()
	var before []string // steps stored before the kill
	for _, s := range storedSteps(jetruntest.ReadEvents(t, e.js, "py-follow")) {
		before = append(before, strings.TrimSuffix(s, "@1"))
	}
	parentWorker("py-pw-b")

	if err := caller.wait(120 * time.Second); err != nil {
		t.Fatalf("live_follow.py: %v\n%s%s", err, caller.stdout, caller.stderr)
	}
	steps, ids, final := followed()
	row := jetruntest.WaitRow(t, e.store, "py-follow", 10*time.Second, jetruntest.Final)
	if final == nil || final["status"] != "completed" || final["attempt"] != float64(2) || row.Attempt != 2 ||
		final["summary"] != fmt.Sprintf("answered in %d turns", turns) {
		t.Fatalf("final %v; row %s attempt %d (%s)", final, row.Status, row.Attempt, row.Error)
	}
	var seqs []uint64
	for _, id := range ids {
		seq, _, _ := strings.Cut(id, ".")
		n, _ := strconv.ParseUint(seq, 10, 64)
		if len(seqs) == 0 || seqs[len(seqs)-1] != n {
			seqs = append(seqs, n)
		}
	}
	var stored []uint64
	for _, ev := range waitFinalEvent(t, e.js, "py-follow") {
		stored = append(stored, ev.Seq)
	}
	if len(slices.Compact(slices.Clone(ids))) != len(ids) || !slices.Equal(seqs, stored) {
		t.Errorf("Python followed %v (ids %v); stored %v", seqs, ids, stored)
	}
	want := make([]string, turns)
	for i := range want {
		want[i] = fmt.Sprintf("think-%d", i+1)
	}
	if !slices.Equal(steps, want) {
		t.Errorf("Python saw steps %v, want think-1..%d once each", steps, turns)
	}
	paid := make(map[string]int)
	for _, l := range counterLines(t, ledger) {
		if strings.HasPrefix(l, "think-") {
			paid[l]++
		}
	}
	for _, name := range before {
		if paid[name] != 1 {
			t.Errorf("step %s, stored before the kill, was paid %d times", name, paid[name])
		}
	}
	for _, name := range want {
		if paid[name] < 1 || paid[name] > 2 {
			t.Errorf("step %s paid %d times, want 1 or 2", name, paid[name])
		}
	}
	t.Logf("stored before the kill: %v; paid: %v", before, paid)
}
