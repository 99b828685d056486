package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// counterLines returns the lines of a step's side-effect counter file:
// the attempts that ran the step's work.
func counterLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// waitCounter waits until the counter file at path has n lines.
func waitCounter(t *testing.T, path string, n int) {
	t.Helper()
	natstest.Eventually(t, 60*time.Second, func() bool { return len(counterLines(t, path)) >= n },
		"%s did not reach %d lines: %v", filepath.Base(path), n, counterLines(t, path))
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// storedSteps lists a run's stored step events as name@attempt.
func storedSteps(evs []jetruntest.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Step != nil {
			out = append(out, fmt.Sprintf("%s@%d", ev.Step.Name, ev.Step.Attempt))
		}
	}
	return out
}

// A worker killed with -9 inside a step, then another killed right after
// the next step was stored: a step stored before a kill never runs again
// (its side-effect counter stays at one), a step interrupted mid-way runs
// again, twice in all, and the run completes with every step stored once.
func TestKilledWorkerNeverRepeatsAStoredStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "two.hold"))
	touch(t, filepath.Join(dir, "three.hold"))
	worker := func(id string) *proc {
		p := start(t, "stepworker", nil, e.url, id)
		p.waitLog("stepworker serving", 60*time.Second)
		return p
	}

	a := worker("step-a")
	e.dispatchInput(t, "stepper", "sk1", map[string]any{"dir": dir, "steps": []string{"one", "two", "three"}})
	waitCounter(t, filepath.Join(dir, "two"), 1) // attempt 1 is inside step two; step one is stored
	a.kill()

	b := worker("step-b")
	waitCounter(t, filepath.Join(dir, "two"), 2) // attempt 2 runs the interrupted step again
	touch(t, filepath.Join(dir, "two.go"))
	waitCounter(t, filepath.Join(dir, "three"), 1) // step two is stored: step three began
	b.kill()

	worker("step-c")
	waitCounter(t, filepath.Join(dir, "three"), 2)
	touch(t, filepath.Join(dir, "three.go"))

	row := jetruntest.WaitRow(t, e.store, "sk1", 90*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 3 || string(row.Output) != `{"one":1,"three":3,"two":2}` {
		t.Fatalf("row: %s attempt %d output %s (%s)", row.Status, row.Attempt, row.Output, row.Error)
	}
	for name, want := range map[string][]string{"one": {"1"}, "two": {"1", "2"}, "three": {"2", "3"}} {
		if got := counterLines(t, filepath.Join(dir, name)); !slices.Equal(got, want) {
			t.Errorf("step %s ran in attempts %v, want %v", name, got, want)
		}
	}
	if got := storedSteps(waitFinalEvent(t, e.js, "sk1")); !slices.Equal(got, []string{"one@1", "two@2", "three@3"}) {
		t.Errorf("stored steps %v, want each once", got)
	}
}

// A Python agent loop through the exec type stores each model call as a
// step; its worker is killed with -9 mid-loop. The next attempt gets the
// stored steps in its request: no step stored before the kill is paid
// again, the call that was running at the kill is paid at most twice, and
// the run completes with every step stored once.
func TestPythonExecChildStepsSurviveAKilledWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agents := map[string]string{"JETRUN_EXEC_AGENTS": "agent-py=" + python3(t) + " " + examples(t, "python", "agent.py")}
	a := e.childWorker(t, "py-step-a", agents)
	ledger := filepath.Join(t.TempDir(), "ledger")
	const turns = 12
	e.dispatchInput(t, "agent-py", "py-s", map[string]any{"question": "tides", "turns": turns, "delay": 0.15, "ledger": ledger})
	natstest.Eventually(t, 60*time.Second, func() bool {
		return len(storedSteps(jetruntest.ReadEvents(t, e.js, "py-s"))) >= 3
	}, "the Python agent did not store 3 steps")
	a.kill()
	var before []string // steps stored before the kill
	for _, s := range storedSteps(jetruntest.ReadEvents(t, e.js, "py-s")) {
		before = append(before, strings.TrimSuffix(s, "@1"))
	}
	e.childWorker(t, "py-step-b", agents)

	row := jetruntest.WaitRow(t, e.store, "py-s", 90*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || string(row.Output) != fmt.Sprintf(`{"turns":%d,"attempt":2}`, turns) {
		t.Fatalf("row: %s attempt %d output %s (%s)", row.Status, row.Attempt, row.Output, row.Error)
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
	for n := 1; n <= turns; n++ {
		if name := fmt.Sprintf("think-%d", n); paid[name] < 1 || paid[name] > 2 {
			t.Errorf("step %s paid %d times, want 1 or 2", name, paid[name])
		}
	}
	evs := waitFinalEvent(t, e.js, "py-s")
	var names []string
	for _, s := range storedSteps(evs) {
		names = append(names, s[:strings.IndexByte(s, '@')])
	}
	// Usage comes with the step lines only: each stored step carries what
	// its call spent, and the run counts a step's usage once, however often
	// the call was made, those attempt 1 stored after its last row sync
	// included (the takeover counts them).
	var stored int64
	for _, ev := range evs {
		if st := ev.Step; st != nil {
			if st.Usage == nil || st.Usage.OutputTokens != 12 || st.Usage.Models["sim-1"].OutputTokens != 12 {
				t.Errorf("step %s usage %+v; want 12 output tokens on sim-1", st.Name, st.Usage)
				continue
			}
			stored += st.Usage.Tokens()
		}
	}
	if row.Usage == nil || row.Usage.Tokens() != stored || row.TreeUsage == nil || row.TreeUsage.Tokens() != stored {
		t.Errorf("run usage %+v, tree %+v; want the stored steps' %d tokens, once", row.Usage, row.TreeUsage, stored)
	}
	want := make([]string, turns)
	for i := range want {
		want[i] = fmt.Sprintf("think-%d", i+1)
	}
	if !slices.Equal(names, want) {
		t.Errorf("stored steps %v, want think-1..%d once each", names, turns)
	}
	t.Logf("stored before the kill: %v; paid: %v", before, paid)
}

// The README's Python steps section works as written: its child-worker
// command (against a test server) serves agent.py, and its jetrun
// dispatch command completes.
func TestReadmePythonAgentSteps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var workerCmd, dispatchCmd string
	for _, c := range readmeCommands(t, "Durable steps from Python", "The contracts", "", 0) {
		switch {
		case strings.Contains(c, "./bin/child-worker"):
			workerCmd = c
		case strings.HasPrefix(c, "./bin/jetrun dispatch"):
			dispatchCmd = c
		}
	}
	if workerCmd == "" || dispatchCmd == "" {
		t.Fatal("README's Python steps section lacks its commands")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// The shell replaces itself with the binary (so that killing it stops
	// the binary); python3 is the real interpreter, not a shim.
	local := func(c string) string {
		c = strings.ReplaceAll(c, "$PWD", root)
		c = strings.Replace(c, "./bin/child-worker", "exec "+filepath.Join(bin, "child-worker"), 1)
		return strings.Replace(c, "./bin/jetrun", "exec "+filepath.Join(bin, "jetrun"), 1)
	}
	env := map[string]string{"JETRUN_NATS_URL": e.url, "PATH": filepath.Dir(python3(t)) + ":" + os.Getenv("PATH")}
	w := startProgram(t, "/bin/sh", env, "-c", local(workerCmd))
	w.waitLog("child-worker serving", 60*time.Second)
	out := startProgram(t, "/bin/sh", env, "-c", local(dispatchCmd))
	if err := out.wait(60 * time.Second); err != nil {
		t.Fatalf("%s: %v\n%s%s", dispatchCmd, err, out.stdout, out.stderr)
	}
	if got := out.stdout.String(); !strings.Contains(got, "answered in 5 turns") {
		t.Fatalf("%s:\n%s", dispatchCmd, got)
	}
}

// The JavaScript producer, following a Python agent's run from the
// stream, sees each durable step by its wire names (name, output,
// attempt, at).
func TestJavaScriptProducerSeesSteps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := interpreter(t, "node")
	dir := examples(t, "js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "nats")); err != nil {
		t.Fatalf("the NATS JavaScript client is not installed (make deps runs npm ci in examples/js): %v", err)
	}
	e.childWorker(t, "js-steps", map[string]string{"JETRUN_EXEC_AGENTS": "agent-py=" + python3(t) + " " + examples(t, "python", "agent.py")})

	cmd := exec.Command(node, "produce.mjs", "--nats", e.url, "--run-id", "js-s", "--agent", "agent-py",
		"--input", `{"turns":3,"delay":0.05}`)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node produce.mjs: %v\n%s", err, out)
	}
	var steps []string
	var final struct{ Status, Summary string }
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var said struct {
			What, Name, At, Status, Summary string
			Bytes                           int
			Attempt                         any // a number on step lines
		}
		if err := json.Unmarshal([]byte(l), &said); err != nil {
			t.Fatalf("produce.mjs printed a non-JSON line %q:\n%s", l, out)
		}
		switch said.What {
		case "step":
			if said.Bytes < 10 || said.At == "" {
				t.Errorf("step line %s", l)
			}
			steps = append(steps, fmt.Sprintf("%s@%v", said.Name, said.Attempt))
		case "final":
			final.Status, final.Summary = said.Status, said.Summary
		}
	}
	if !slices.Equal(steps, []string{"think-1@1", "think-2@1", "think-3@1"}) || final.Status != "completed" || final.Summary != "answered in 3 turns" {
		t.Fatalf("JavaScript saw steps %v, final %+v:\n%s", steps, final, out)
	}
}
