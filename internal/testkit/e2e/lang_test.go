package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// The tests in this file prove the contracts of docs/protocol.md from
// other languages: children in Python (http and exec agent types) and
// shell (exec), and a producer in JavaScript. make test installs the
// interpreters and the JavaScript client (make deps); without them these
// tests fail with the reason, they never skip.

// examples is the repository's examples directory.
func examples(t *testing.T, path ...string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(append([]string{"..", "..", "..", "examples"}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// interpreter returns the absolute path of a program on PATH, or fails.
func interpreter(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is missing (make deps installs it): %v", name, err)
	}
	return path
}

// python3 returns the real Python 3 interpreter (not a version manager's
// shim, which depends on HOME).
func python3(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(interpreter(t, "python3"), "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startProgram runs path as a child process of the test, like start.
func startProgram(t *testing.T, path string, env map[string]string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{t: t, name: filepath.Base(path), cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s %v stdout:\n%s\nstderr:\n%s", path, args, p.stdout, p.stderr)
		}
	})
	return p
}

// pythonChild starts examples/python/researcher.py on a free port and
// returns its URL.
func pythonChild(t *testing.T) (*proc, string) {
	t.Helper()
	p := startProgram(t, python3(t), nil, examples(t, "python", "researcher.py"), "--port", "0")
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	var url string
	natstest.Eventually(t, 30*time.Second, func() bool {
		if p.exited() {
			t.Fatalf("researcher.py exited: %v\n%s", p.err, p.stderr)
		}
		if m := listening.FindStringSubmatch(p.stdout.String()); m != nil {
			url = m[1]
		}
		return url != ""
	}, "researcher.py did not start listening")
	return p, url
}

func (e *env) dispatchInput(t *testing.T, agentType, id string, input any) {
	t.Helper()
	if _, err := e.client.Dispatch(context.Background(), parent.Request{AgentType: agentType, RunID: id, Input: input}); err != nil {
		t.Fatal(err)
	}
}

func chunkText(evs []jetruntest.Event) []string {
	var out []string
	for _, c := range jetruntest.Chunks(evs) {
		var s string
		_ = json.Unmarshal(c.Data, &s)
		out = append(out, s)
	}
	return out
}

func milestoneNames(evs []jetruntest.Event) []string {
	var out []string
	for _, m := range jetruntest.Milestones(evs) {
		out = append(out, m.Name)
	}
	return out
}

// A Python child behind the http type streams chunks, progress and
// milestones, waits for a signal and returns a result with its payload.
func TestPythonHTTPChildStreamsWaitsForApprovalAndCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, url := pythonChild(t)
	e.childWorker(t, "py-http", map[string]string{"JETRUN_HTTP_AGENTS": "research-py=" + url})

	e.dispatchInput(t, "research-py", "py-1", map[string]any{"topic": "tides", "steps": 3, "stepDelay": 0.05, "approval": true})
	jetruntest.WaitRow(t, e.store, "py-1", 30*time.Second, func(r *model.Row) bool {
		return r.WaitingFor == "approve" && r.Progress != nil && r.Progress.Phase == "waiting for approval"
	})
	if _, err := e.client.Signal(context.Background(), "py-1", "approve", map[string]any{"approved": true, "by": "ops"}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "py-1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Summary != "researched tides in 3 steps" {
		t.Fatalf("row: %s %q (%s)", row.Status, row.Summary, row.Error)
	}
	var out struct {
		Approval     map[string]any `json:"approval"`
		StepsRunHere int            `json:"stepsRunHere"`
	}
	// Its one attempt ran the 3 steps, before the wait.
	if err := json.Unmarshal(row.Output, &out); err != nil || out.Approval["by"] != "ops" || out.StepsRunHere != 3 {
		t.Fatalf("output %s: %v", row.Output, err)
	}
	evs := waitFinalEvent(t, e.js, "py-1")
	if got := chunkText(evs); !slices.Equal(got, []string{"step 1: read about tides\n", "step 2: read about tides\n", "step 3: read about tides\n"}) {
		t.Fatalf("chunks %q", got)
	}
	if got := milestoneNames(evs); !slices.Equal(got, []string{"step-1", "step-2", "step-3", "approved"}) {
		t.Fatalf("milestones %v", got)
	}
}

// A cancel reaches the Python child: the worker hangs up and the child
// stops working on the run.
func TestPythonHTTPChildCancelledMidRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	py, url := pythonChild(t)
	e.childWorker(t, "py-cancel", map[string]string{"JETRUN_HTTP_AGENTS": "research-py=" + url})

	e.dispatchInput(t, "research-py", "py-c", map[string]any{"topic": "eels", "steps": 1000, "stepDelay": 0.05})
	jetruntest.WaitRow(t, e.store, "py-c", 30*time.Second, func(r *model.Row) bool { return r.Milestones >= 2 })
	if _, err := e.client.Cancel(context.Background(), "py-c", "enough eels"); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "py-c", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusAborted || row.Error != "cancelled: enough eels" {
		t.Fatalf("row: %s %q", row.Status, row.Error)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(py.stderr.String(), "run py-c: the worker hung up; stopping")
	}, "the Python child did not stop the cancelled run:\n%s", py.stderr)
	if m := jetruntest.Milestones(waitFinalEvent(t, e.js, "py-c")); len(m) >= 1000 {
		t.Fatalf("%d milestones: the run was not stopped", len(m))
	}
}

// A child-worker killed with -9 mid-run: the run is taken over and the
// Python child, given the milestones reached, resumes after them.
func TestPythonHTTPChildResumesAfterATakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	py, url := pythonChild(t)
	agents := map[string]string{"JETRUN_HTTP_AGENTS": "research-py=" + url}
	a := e.childWorker(t, "py-a", agents)

	const steps = 40
	e.dispatchInput(t, "research-py", "py-t", map[string]any{"topic": "moss", "steps": steps, "stepDelay": 0.1})
	jetruntest.WaitRow(t, e.store, "py-t", 30*time.Second, func(r *model.Row) bool { return r.Milestones >= 3 })
	a.kill()
	e.childWorker(t, "py-b", agents)

	row := jetruntest.WaitRow(t, e.store, "py-t", 90*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || row.Worker != "" && row.Worker != "py-b" {
		t.Fatalf("row: %s attempt %d worker %s (%s)", row.Status, row.Attempt, row.Worker, row.Error)
	}
	var out struct {
		StepsRunHere int `json:"stepsRunHere"`
		Attempt      int `json:"attempt"`
	}
	if err := json.Unmarshal(row.Output, &out); err != nil {
		t.Fatal(err)
	}
	evs := waitFinalEvent(t, e.js, "py-t")
	if got := jetruntest.MilestoneSeqs(evs); !slices.Equal(got, oneTo(steps)) {
		t.Fatalf("milestone sequences %v, want 1..%d once each", got, steps)
	}
	var first int // milestones of attempt 1
	for _, m := range jetruntest.Milestones(evs) {
		if m.Attempt == 1 {
			first++
		}
	}
	if out.Attempt != 2 || first < 3 || out.StepsRunHere != steps-first {
		t.Fatalf("attempt %d ran %d steps after attempt 1 reached %d milestones", out.Attempt, out.StepsRunHere, first)
	}
	if want := fmt.Sprintf("run py-t attempt 2: starting at step %d", first+1); !strings.Contains(py.stderr.String(), want) {
		t.Fatalf("the Python child did not log %q:\n%s", want, py.stderr)
	}
}

// A shell script and a Python script through the exec type; a long one is
// cancelled and leaves no process behind.
func TestExecShellAndPythonScripts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "exec", map[string]string{
		"JETRUN_EXEC_AGENTS": "countdown=" + examples(t, "shell", "countdown.sh") +
			",wordcount=" + python3(t) + " " + examples(t, "python", "wordcount.py"),
		"JETRUN_EXEC_GRACE": "1s",
	})

	e.dispatchInput(t, "countdown", "sh-1", map[string]any{"from": 3, "delay": 0.05})
	e.dispatchInput(t, "wordcount", "wc-1", map[string]any{"text": "the quick brown\nfox jumps"})
	e.dispatchInput(t, "wordcount", "wc-bad", map[string]any{"words": 3})

	row := jetruntest.WaitRow(t, e.store, "sh-1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Summary != "liftoff after 3" || string(row.Output) != `{"from":3}` {
		t.Fatalf("countdown: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
	evs := waitFinalEvent(t, e.js, "sh-1")
	if got := chunkText(evs); len(got) != 4 || got[1] != "T-minus 3\n" || got[3] != "T-minus 1\n" {
		t.Fatalf("countdown chunks %q", got)
	}
	if got := milestoneNames(evs); !slices.Equal(got, []string{"liftoff"}) {
		t.Fatalf("countdown milestones %v", got)
	}

	row = jetruntest.WaitRow(t, e.store, "wc-1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Summary != "5 words in 2 lines" || string(row.Output) != `{"words":5,"lines":2}` {
		t.Fatalf("wordcount: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
	if got := milestoneNames(waitFinalEvent(t, e.js, "wc-1")); !slices.Equal(got, []string{"line-1", "line-2"}) {
		t.Fatalf("wordcount milestones %v", got)
	}
	row = jetruntest.WaitRow(t, e.store, "wc-bad", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || !strings.Contains(row.Error, "exit status 2") || !strings.HasSuffix(row.Error, `input must be {"text": "..."}`) {
		t.Fatalf("wordcount with bad input: %s %q", row.Status, row.Error)
	}

	// A long countdown, cancelled: its process is gone afterwards.
	e.dispatchInput(t, "countdown", "sh-long", map[string]any{"from": 100000, "delay": 0.2})
	var pid int
	natstest.Eventually(t, 30*time.Second, func() bool {
		for _, c := range chunkText(jetruntest.ReadEvents(t, e.js, "sh-long")) {
			if f := strings.Fields(c); len(f) >= 3 && f[0] == "countdown" && f[1] == "pid" {
				pid, _ = strconv.Atoi(f[2])
			}
		}
		return pid > 0
	}, "the countdown did not report its pid")
	if !processRuns(pid) {
		t.Fatalf("countdown pid %d is not running", pid)
	}
	if _, err := e.client.Cancel(context.Background(), "sh-long", ""); err != nil {
		t.Fatal(err)
	}
	if row := jetruntest.WaitRow(t, e.store, "sh-long", 30*time.Second, jetruntest.Final); row.Status != events.StatusAborted {
		t.Fatalf("long countdown: %s %q", row.Status, row.Error)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return !processRuns(pid) }, "countdown pid %d still runs after the cancel", pid)
}

// processRuns says whether pid runs; a zombie does not (the child-worker
// reaps its own; an orphan is init's).
func processRuns(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}

// A JavaScript producer, written from docs/protocol.md alone, dispatches a
// run, follows its events, signals it, replays from a stream sequence and
// reads the final row.
func TestJavaScriptProducer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := interpreter(t, "node")
	dir := examples(t, "js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "nats")); err != nil {
		t.Fatalf("the NATS JavaScript client is not installed (make deps runs npm ci in examples/js): %v", err)
	}
	e.childWorker(t, "js-demo", nil)

	cmd := exec.Command(node, "produce.mjs", "--nats", e.url, "--run-id", "js-1", "--agent", "demo",
		"--input", `{"steps":3,"stepMs":50,"approveAt":2}`, "--signal", "approve", "--payload", `{"approved":true}`)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node produce.mjs: %v\n%s", err, out)
	}
	type line struct {
		What           string
		Kind           string
		Seq            uint64
		Body           map[string]any
		SameAsFollowed bool
		Status         string
		Summary        string
		Row            map[string]any
	}
	var said []line
	var trail []string // what happened, in order
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("produce.mjs printed a non-JSON line %q:\n%s", sc.Text(), out)
		}
		said = append(said, l)
		step := l.What
		if l.What == "event" {
			state, _ := l.Body["status"].(string)
			if l.Kind == "signal" {
				state, _ = l.Body["state"].(string)
			}
			step = l.Kind + ":" + state
		}
		trail = append(trail, step)
	}
	want := []string{"dispatched", "status:running", "signal:waiting", "signalled", "signal:received", "status:completed", "replayed", "row", "final"}
	var got []string
	for _, s := range trail {
		if slices.Contains(want, s) {
			got = append(got, s)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("produce.mjs saw %v, want %v in order:\n%s", got, want, out)
	}
	final, replayed := said[len(said)-1], said[len(said)-3]
	if final.Status != "completed" || final.Summary != "finished 3 steps" || !replayed.SameAsFollowed {
		t.Fatalf("final %+v, replayed %+v:\n%s", final, replayed, out)
	}
	// What JavaScript saw is what jetrun stored.
	row := jetruntest.WaitRow(t, e.store, "js-1", 10*time.Second, jetruntest.Final)
	evs := jetruntest.ReadEvents(t, e.js, "js-1")
	var followed []uint64
	for _, l := range said {
		if l.What == "event" {
			followed = append(followed, l.Seq)
		}
	}
	var stored []uint64
	for _, ev := range evs {
		stored = append(stored, ev.Seq)
	}
	if !slices.Equal(followed, stored) || row.Status != events.StatusCompleted || said[len(said)-2].Row["summary"] != row.Summary {
		t.Fatalf("JavaScript followed %v; stored %v; row %s %q", followed, stored, row.Status, row.Summary)
	}
}

// The README's Python child section works as written: its two commands
// (with free ports instead of 9000 and 8080, and the built parent-worker
// for make run) and its curl commands.
func TestReadmePythonChild(t *testing.T) {
	t.Parallel()
	cmds := readmeCommands(t, "### A child in Python", "### Agent registry and LLM tools", "", 0)
	var pyCmd, runCmd string
	var curls []string
	for _, c := range cmds {
		switch {
		case strings.HasPrefix(c, "python3 "):
			pyCmd = c
		case strings.Contains(c, "make run"):
			runCmd = c
		case strings.HasPrefix(c, "curl "):
			curls = append(curls, c)
		}
	}
	if pyCmd == "" || runCmd == "" || len(curls) < 3 {
		t.Fatalf("README's Python section lacks its commands: %q", cmds)
	}
	pyPort, httpAddr := natstest.FreePort(t), fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	args := strings.Fields(strings.Replace(pyCmd, "9000", fmt.Sprint(pyPort), 1))[1:]
	args[0] = examples(t, strings.TrimPrefix(args[0], "examples/"))
	py := startProgram(t, python3(t), nil, args...)
	natstest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(py.stdout.String(), "listening on") },
		"researcher.py did not start")

	env := map[string]string{"JETRUN_CHILDREN": "demo", "JETRUN_HTTP_ADDR": httpAddr, "JETRUN_EMBEDDED_PORT": "-1"}
	for _, f := range strings.Fields(runCmd) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "JETRUN_") {
			env[k] = strings.Replace(v, "9000", fmt.Sprint(pyPort), 1)
		}
	}
	pw := start(t, "parent-worker", env)
	pw.waitLog("parent-worker ready", 60*time.Second)
	var outs []string
	for _, c := range curls {
		c = strings.ReplaceAll(c, "127.0.0.1:8080", httpAddr)
		out, err := exec.Command("sh", "-c", c).CombinedOutput()
		if err != nil {
			t.Fatalf("%s\n%v\n%s", c, err, out)
		}
		outs = append(outs, string(out))
	}
	eels := slices.IndexFunc(outs, func(o string) bool { return strings.Contains(o, "researched eels in 3 steps") })
	if !strings.Contains(outs[0], "researched tides in 3 steps") || eels < 0 {
		t.Fatalf("the README's Python runs did not complete:\n%s", strings.Join(outs, "\n"))
	}
}
