package e2e_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func readme(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
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

// Every curl command of the README's tour works against a parent-worker
// started the way make run starts it.
func TestReadmeTourCommands(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN": "demo", "JETRUN_HTTP_ADDR": addr, "JETRUN_EMBEDDED_PORT": "-1",
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
	pw.signal(syscall.SIGTERM)
	if err := pw.wait(30 * time.Second); err != nil {
		t.Fatalf("parent-worker exit after SIGTERM: %v", err)
	}
}

// make run, as a new user runs it: builds, starts parent-worker on an
// embedded server, and the demo fan-out completes. Ports and the data
// directory are moved aside so the test runs anywhere.
func TestMakeRunShowsDemoRunsCompleting(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
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

	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(out.String(), "demo fan-out done") {
		if time.Now().After(deadline) {
			t.Fatalf("make run: no completed fan-out within 3 minutes:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	text := out.String()
	if n := strings.Count(text, "completed: finished"); n != 5 {
		t.Fatalf("make run showed %d completed demo runs, want 5:\n%s", n, text)
	}
	for _, want := range []string{"NATS        nats://127.0.0.1:", "kv watch jetrun_runs", "HTTP API    http://127.0.0.1:"} {
		if !strings.Contains(text, want) {
			t.Errorf("make run output lacks %q", want)
		}
	}
	stop(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("make run did not stop on SIGTERM:\n%s", out)
	}
}
