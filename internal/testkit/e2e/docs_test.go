package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

func readme(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// operations returns docs/operations.md.
func operations(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// helpVars runs "<binary> --help" and returns variable → default.
func helpVars(t *testing.T, binary string) map[string]string {
	t.Helper()
	p := start(t, binary, nil, "--help")
	if err := p.wait(30 * time.Second); err != nil {
		t.Fatalf("%s --help: %v", binary, err)
	}
	vars := map[string]string{}
	line := regexp.MustCompile(`^\s+(JETRUN_[A-Z_]+)\s{2,}(\S*)\s{2,}`)
	for _, l := range p.lines() {
		if m := line.FindStringSubmatch(l); m != nil {
			vars[m[1]] = m[2]
		} else if m := regexp.MustCompile(`^\s+(JETRUN_[A-Z_]+)\s{2,}`).FindStringSubmatch(l); m != nil {
			vars[m[1]] = ""
		}
	}
	if len(vars) < 10 {
		t.Fatalf("%s --help lists %d variables:\n%s", binary, len(vars), p.stdout)
	}
	return vars
}

// The README's configuration table lists exactly what --help lists, with the
// same defaults and the right binaries.
func TestReadmeConfigTableMatchesHelp(t *testing.T) {
	t.Parallel()
	parentVars, childVars := helpVars(t, "parent-worker"), helpVars(t, "child-worker")
	row := regexp.MustCompile("^\\| `(JETRUN_[A-Z_]+)` \\|\\s*`?([^`|]*?)`?\\s*\\| ([a-z-]+) \\|")
	documented := map[string]bool{}
	for _, l := range strings.Split(readme(t), "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name, def, usedBy := m[1], strings.TrimSpace(m[2]), m[3]
		documented[name] = true
		pd, inParent := parentVars[name]
		cd, inChild := childVars[name]
		want := map[string]bool{"both": inParent && inChild, "parent-worker": inParent && !inChild, "child-worker": inChild && !inParent}
		if !want[usedBy] {
			t.Errorf("README says %s is used by %s; --help: parent-worker %v, child-worker %v", name, usedBy, inParent, inChild)
		}
		if inParent && pd != def || inChild && cd != def {
			t.Errorf("README default of %s is %q; --help says parent %q, child %q", name, def, pd, cd)
		}
	}
	for _, vars := range []map[string]string{parentVars, childVars} {
		for name := range vars {
			if !documented[name] {
				t.Errorf("%s is in --help but not in the README's configuration table", name)
			}
		}
	}
}

// tourCommands returns the curl commands of the README's tour, in order.
func tourCommands(t *testing.T) []string {
	t.Helper()
	text := readme(t)
	start := strings.Index(text, "## A five-minute tour")
	end := strings.Index(text, "### From Go")
	if start < 0 || end < start {
		t.Fatal("README has no tour section")
	}
	var cmds []string
	sc := bufio.NewScanner(strings.NewReader(text[start:end]))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "curl ") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) < 5 {
		t.Fatalf("tour has %d curl commands", len(cmds))
	}
	return cmds
}

// readmeCommands returns the README's command lines starting with prefix
// between the markers from and to, in order, without their comments.
func readmeCommands(t *testing.T, from, to, prefix string, atLeast int) []string {
	t.Helper()
	text := readme(t)
	start := strings.Index(text, from)
	end := strings.Index(text, to)
	if start < 0 || end < start {
		t.Fatalf("README has no section from %q to %q", from, to)
	}
	comment := regexp.MustCompile(`\s{2,}#.*$`)
	var cmds []string
	for _, l := range strings.Split(text[start:end], "\n") {
		if strings.HasPrefix(l, prefix) {
			cmds = append(cmds, comment.ReplaceAllString(l, ""))
		}
	}
	if len(cmds) < atLeast {
		t.Fatalf("README has %d %q commands there", len(cmds), prefix)
	}
	return cmds
}

// natsCommands returns the nats CLI commands of the README's tour.
func natsCommands(t *testing.T) []string {
	return readmeCommands(t, "With the [`nats` CLI]", "To have parent-worker deliver finishes itself", "nats ", 10)
}

// Every command of the README's tour works against a parent-worker started
// the way make run starts it: the curl commands, then the recipes for the
// real nats CLI (v0.2.0), whose effects are checked as a user would see
// them.
func TestReadmeTourCommands(t *testing.T) {
	t.Parallel()
	nats := natsCLI(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	natsPort := natstest.FreePort(t)
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN": "demo", "JETRUN_HTTP_ADDR": addr, "JETRUN_EMBEDDED_PORT": fmt.Sprint(natsPort),
		"JETRUN_RECONCILE_INTERVAL": "500ms",
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	for _, c := range tourCommands(t) {
		c = strings.ReplaceAll(c, "http://127.0.0.1:8080", "http://"+addr)
		out, err := exec.Command("sh", "-c", c).CombinedOutput()
		if err != nil {
			t.Fatalf("%s\n%v\n%s", c, err, out)
		}
		t.Logf("%s\n%s", c, out)
	}

	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), fmt.Sprintf("NATS_URL=nats://127.0.0.1:%d", natsPort),
		fmt.Sprintf("JETRUN_NATS_URL=nats://127.0.0.1:%d", natsPort)}
	// The jetrun CLI lines.
	for _, c := range readmeCommands(t, "The `jetrun` CLI (built by", "Scale out:", "./bin/jetrun ", 5) {
		cmd := exec.Command("sh", "-c", "exec "+strings.Replace(c, "./bin/jetrun", filepath.Join(bin, "jetrun"), 1))
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
		t.Logf("%s\n%s", c, out)
		if strings.Contains(c, "replay --follow tour-6") && !strings.Contains(string(out), "status     completed") {
			t.Fatalf("%s did not follow the run to its end:\n%s", c, out)
		}
		// The tour's nested runs are there to be listed: one row each.
		if strings.Contains(c, " ls --parent ") && strings.Count(string(out), "completed") != 3 {
			t.Fatalf("%s does not list the 3 nested runs of the tour:\n%s", c, out)
		}
		// The tree it shows has what a trace is for: steps and usage
		// (a demo step per step of each of the 4 runs).
		if strings.HasSuffix(c, " get tour-7") {
			tourTreeHasStepsAndUsage(t, c, string(out))
		}
		// The re-run was given lead-1 and lead-2, and did lead-3 to lead-5.
		if strings.HasSuffix(c, " diff tour-9 tour-9b") && (strings.Count(string(out), "given from tour-9") != 2 ||
			!strings.Contains(string(out), "only-b") || !strings.Contains(string(out), "2 equal, 2 changed")) {
			t.Fatalf("%s:\n%s", c, out)
		}
	}

	status := func(id string) string {
		resp, err := http.Get("http://" + addr + "/v1/runs/" + id)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var row struct{ Status string }
		_ = json.NewDecoder(resp.Body).Decode(&row)
		return row.Status
	}
	completed := func(id string) {
		natstest.Eventually(t, 30*time.Second, func() bool { return status(id) == "completed" }, "%s did not complete", id)
	}
	type watcher struct {
		cmd string
		p   *exec.Cmd
		out *syncBuffer
	}
	var watchers []watcher
	outputs := map[string]string{}
	for _, c := range natsCommands(t) {
		switch {
		case strings.Contains(c, "stream view JETRUN_EVENTS"):
			completed("tour-3") // the whole timeline, to its end
		case strings.Contains(c, "jetrun.dispatch.demo 'not json'"):
			completed("tour-5") // after its signal
		}
		// exec: the shell only parses the quoting; signals reach nats itself.
		args := []string{"-c", "exec " + strings.Replace(c, "nats ", nats+" ", 1)}
		if strings.Contains(c, " watch ") || strings.Contains(c, " sub ") {
			p := exec.Command("sh", args...)
			p.Env, p.WaitDelay = env, 5*time.Second
			buf := &syncBuffer{}
			p.Stdout, p.Stderr = buf, buf
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
			watchers = append(watchers, watcher{c, p, buf})
			// A subscription misses what happens before it is in place.
			natstest.Eventually(t, 10*time.Second, func() bool { return buf.String() != "" }, "%s printed nothing", c)
			continue
		}
		cmd := exec.Command("sh", args...)
		cmd.Env = env
		var out []byte
		var err error
		if strings.Contains(c, "stream view") { // pages interactively: a terminal
			out, err = onTerminal(cmd)
		} else {
			out, err = cmd.CombinedOutput()
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
		outputs[c] = string(out)
		t.Logf("%s\n%s", c, out)
	}
	completed("tour-5")
	// The live views saw it all happen.
	wants := map[string][]string{
		"nats kv watch jetrun_runs":      {"PUT jetrun_runs > tour-3", `"status":"completed"`},
		"nats sub 'jetrun.run.>'":        {"jetrun.run.tour-3.status", "jetrun.run.tour-5.signal"},
		"nats sub 'jetrun.run.tour-3.>'": {`"status":"running"`, `"status":"completed"`}, // from its start
		"nats sub 'jetrun.obs.>'":        {"jetrun.obs.reconcile.begin"},
	}
	for _, w := range watchers {
		for _, want := range wants[w.cmd] {
			natstest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(w.out.String(), want) },
				"%s never showed %q:\n%s", w.cmd, want, w.out)
		}
	}
	for c, want := range map[string]string{
		"nats stream view JETRUN_EVENTS --subject 'jetrun.run.tour-3.>' 100": `"status":"completed"`,
		"nats kv get jetrun_runs tour-3":                                     `"status":"completed"`,
		"nats stream view JETRUN_DLQ 100":                                    "Jetrun-Reason: bad dispatch: payload is not a JSON object",
		"nats stream view JETRUN_FINISH 100":                                 `"runId":"tour-4"`,
	} {
		if !strings.Contains(outputs[c], want) {
			t.Errorf("%s: output lacks %q:\n%s", c, want, outputs[c])
		}
	}

	// The agent registry's recipes: each shows the demo type the
	// parent-worker's pool announces.
	const registry, registryEnd = "### Agent registry and LLM tools", "In Go, describe a type"
	var lines []string
	for _, prefix := range []string{"jetrun ", "curl ", "nats "} {
		lines = append(lines, readmeCommands(t, registry, registryEnd, prefix, 1)...)
	}
	for _, c := range lines {
		c = strings.ReplaceAll(c, "http://127.0.0.1:8080", "http://"+addr)
		c = strings.Replace(strings.Replace(c, "jetrun ", filepath.Join(bin, "jetrun")+" ", 1), "nats ", nats+" ", 1)
		cmd := exec.Command("sh", "-c", "exec "+c)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
		if !strings.Contains(string(out), "demo") {
			t.Errorf("%s does not show the demo agent type:\n%s", c, out)
		}
	}

	pw.signal(syscall.SIGTERM)
	if err := pw.wait(30 * time.Second); err != nil {
		t.Fatalf("parent-worker exit after SIGTERM: %v", err)
	}
}

// tourTreeHasStepsAndUsage checks jetrun get's tree of tour-7 (2 steps, 3
// nested runs of demo.ChildSteps): a stored step per demo step, each with
// the demo's usage, and the tree's totals.
func tourTreeHasStepsAndUsage(t *testing.T, c, out string) {
	t.Helper()
	steps := int64(2 + 3*demo.ChildSteps)
	u := demo.LeadUsage
	want := fmt.Sprintf("tree totals  4 runs, %d steps, %d in + %d out tokens", steps, steps*u.InputTokens, steps*u.OutputTokens)
	if !strings.Contains(out, want) {
		t.Fatalf("%s: no %q:\n%s", c, want, out)
	}
	if n := strings.Count(out, demo.StepName(1)+"  "); n != 4 {
		t.Fatalf("%s shows step %s %d times, want once per run (4):\n%s", c, demo.StepName(1), n, out)
	}
}

// onTerminal runs cmd on a pseudo-terminal and returns what it printed.
func onTerminal(cmd *exec.Cmd) ([]byte, error) {
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	_, _ = io.Copy(&out, f)
	_ = f.Close()
	return out.Bytes(), cmd.Wait()
}

var (
	natsCLIOnce sync.Once
	natsCLIPath string
	natsCLIErr  error
)

// natsCLI builds the stock nats CLI v0.2.0 with make nats, as the README
// tells a user to, once per test binary.
func natsCLI(t *testing.T) string {
	t.Helper()
	natsCLIOnce.Do(func() {
		root, err := filepath.Abs("../../..")
		if err != nil {
			natsCLIErr = err
			return
		}
		build := exec.Command("make", "--no-print-directory", "nats", "BIN="+bin)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			natsCLIErr = fmt.Errorf("make nats: %v\n%s", err, out)
			return
		}
		natsCLIPath = filepath.Join(bin, "nats")
	})
	if natsCLIErr != nil {
		t.Fatal(natsCLIErr)
	}
	return natsCLIPath
}

// make run, as a new user runs it: says it builds before the build, starts
// parent-worker on an embedded server, and the demo fan-out completes; a
// double Ctrl-C (SIGINT to the process group, as a terminal sends it) stops
// it without make reporting an error (it said "make: *** Error 1").
// Ports and the data directory are moved aside so the test runs anywhere.
func TestMakeRunShowsDemoRunsCompleting(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "run")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"JETRUN_HTTP_ADDR=127.0.0.1:0", "JETRUN_EMBEDDED_PORT=-1", "JETRUN_DATA_DIR="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func(sig syscall.Signal) { _ = syscall.Kill(-cmd.Process.Pid, sig) }
	t.Cleanup(func() {
		stop(syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	})

	natstest.Eventually(t, 3*time.Minute, func() bool { return strings.Contains(out.String(), "demo fan-out done") },
		"make run: no completed fan-out:\n%s", out)
	text := out.String()
	if said, built := strings.Index(text, "building bin/parent-worker"), strings.Index(text, "go build"); said < 0 || built < said {
		t.Errorf("make run does not say what it builds before the build:\n%s", text)
	}
	if n := strings.Count(text, "completed: finished"); n != 5 {
		t.Fatalf("make run showed %d completed demo runs, want 5:\n%s", n, text)
	}
	for _, want := range []string{"NATS        nats://127.0.0.1:", "kv watch jetrun_runs", "HTTP API    http://127.0.0.1:"} {
		if !strings.Contains(text, want) {
			t.Errorf("make run output lacks %q", want)
		}
	}

	// The tour's "Open http://127.0.0.1:8080/": a first visit in a fresh
	// browser profile lists the five demo runs, completed.
	m := regexp.MustCompile(`web UI\s+(http://\S+)/`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("make run output has no web UI address:\n%s", text)
	}
	runs := newAPIClient(t, m[1]).list("").Runs
	if len(runs) != 5 || slices.ContainsFunc(runs, func(s runSummary) bool { return s.Status != "completed" }) {
		t.Fatalf("GET /v1/runs after make run: %+v", runs)
	}
	checkListed(t, "the web UI after make run", domRows(t, capture(t, chromiumPath(t), m[1]+"/", "make-run-list")), runs)

	api := newAPIClient(t, m[1])
	api.dispatch("long", nil, map[string]int{"steps": 1000, "stepMs": 50}) // the first Ctrl-C waits for it
	api.waitRun("long", "to run", func(s runSummary) bool { return s.Status == "running" })
	stop(syscall.SIGINT)
	natstest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(out.String(), "a second signal stops at once") },
		"the first Ctrl-C was not seen:\n%s", out)
	stop(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("make run did not stop on a double Ctrl-C:\n%s", out)
	}
	text = out.String()
	if !strings.Contains(text, "second interrupt: stopping now") {
		t.Errorf("the second Ctrl-C did not stop parent-worker at once:\n%s", text)
	}
	if strings.Contains(text, "make: ***") {
		t.Errorf("make reports an error after a double Ctrl-C:\n%s", text)
	}
}

// The command lines of docs/operations.md's production checklist work as
// shown against a parent-worker with read and write tokens.
func TestProductionChecklistCommands(t *testing.T) {
	t.Parallel()
	cmds := checklistCommands(t, "curl ")
	const readTok, writeTok = "checklist-read-0123456789", "checklist-write-0123456789"
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN": "demo", "JETRUN_HTTP_ADDR": addr, "JETRUN_EMBEDDED_PORT": "-1",
		"JETRUN_HTTP_TOKENS": "write=" + writeTok + ",read=" + readTok,
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	for _, c := range cmds {
		c = strings.ReplaceAll(c, "127.0.0.1:8080", addr)
		cmd := exec.Command("sh", "-c", c)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "READ_TOKEN=" + readTok, "WRITE_TOKEN=" + writeTok}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s\n%v\n%s", c, err, out)
		}
		t.Logf("%s\n%s", c, out)
	}
}

// checklistCommands returns the lines of docs/operations.md's production
// checklist that run tool (as shown: "curl ", or refused: "! curl "),
// failing the test when it has fewer than five.
func checklistCommands(t *testing.T, tool string) []string {
	t.Helper()
	text := operations(t)
	from := strings.Index(text, "## Production checklist")
	if from < 0 {
		t.Fatal("docs/operations.md has no production checklist")
	}
	var cmds []string
	for _, l := range strings.Split(text[from:], "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, tool) || strings.HasPrefix(l, "! "+tool) {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) < 5 {
		t.Fatalf("the checklist has %d %scommands", len(cmds), tool)
	}
	return cmds
}

// docs/operations.md's recipes for spread events streams agree with
// jetrun: its python3 one-liner names the partition wire.Partition does
// (which stream to view), and its server mapping is the one jetrun's tests
// install (wire.EventsMapping).
func TestOperationsPartitionRecipes(t *testing.T) {
	t.Parallel()
	text := operations(t)
	recipe := regexp.MustCompile("`python3 (-c '[^']*') <id> <N>`").FindStringSubmatch(text)
	if recipe == nil {
		t.Fatal("docs/operations.md has no python3 partition recipe")
	}
	py := python3(t)
	for _, id := range []string{"r1", "tour-3", "run_0042", "9f1c2b7e-6a0d-4c1e-8b3a-2f5d7e9a1c3b", "a"} {
		for _, n := range []int{2, 3, 5, 16} {
			c := fmt.Sprintf("exec %s %s %s %d", py, recipe[1], id, n)
			out, err := exec.Command("sh", "-c", c).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
			if got, want := strings.TrimSpace(string(out)), fmt.Sprint(wire.Partition(id, n)); got != want {
				t.Errorf("run %s over %d streams: the recipe says partition %s, jetrun uses %s", id, n, got, want)
			}
		}
	}
	mapping := regexp.MustCompile(`"(jetrun\.run\.[^"]*)": "([^"]*)"`).FindStringSubmatch(text)
	if mapping == nil {
		t.Fatal("docs/operations.md has no server mapping for the run subjects")
	}
	if from, to := wire.Namespace("").EventsMapping(3); mapping[1] != from || mapping[2] != to {
		t.Errorf("documented mapping %q: %q; jetrun's for 3 streams %q: %q", mapping[1], mapping[2], from, to)
	}
}
