package e2e_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
)

// jetrunCLI runs the jetrun CLI against e's server and returns its
// standard output and exit code; with tty it runs on a pseudo-terminal, as
// a person at a terminal would.
func (e *env) jetrunCLI(t *testing.T, tty bool, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "jetrun"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "JETRUN_NATS_URL=" + e.url}
	var out bytes.Buffer
	if tty {
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(&out, f) // until the process exits (EIO)
		_ = f.Close()
	} else {
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitCode()
	}
	if err != nil {
		t.Fatalf("jetrun %v: %v", args, err)
	}
	return out.String(), 0
}

// A user at a terminal: dispatch --wait draws a live progress bar with the
// phase and message, and the exit code says how the run ended.
func TestCLIDispatchWaitOnATerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "child-cli", nil)

	out, code := e.jetrunCLI(t, true, "dispatch", "--wait", "--run-id", "cli-ok", "demo", `{"steps":4,"stepMs":200}`)
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	for _, want := range []string{
		"\r\x1b[2K[", // the bar is redrawn in place
		"█",
		"researching: step 2 of 4",
		"✓ step-4",
		"✔ cli-ok completed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%q", want, out)
		}
	}
	if n := len(regexp.MustCompile(`\] +\d+%`).FindAllString(out, -1)); n < 3 {
		t.Errorf("the progress bar was drawn %d times:\n%q", n, out)
	}

	out, code = e.jetrunCLI(t, true, "dispatch", "--wait", "--run-id", "cli-err", "demo", `{"steps":3,"stepMs":10,"failAt":2}`)
	if code != 3 || !strings.Contains(out, "step 2 failed") {
		t.Fatalf("failing run: exit %d, want 3:\n%s", code, out)
	}

	// Cancelled while a user waits on it: exit code 4.
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, code := e.jetrunCLI(t, true, "dispatch", "--wait", "--run-id", "cli-cancel", "demo", `{"steps":100,"stepMs":100}`)
		done <- result{out, code}
	}()
	jetruntest.WaitRow(t, e.store, "cli-cancel", 30*time.Second, func(r *model.Row) bool { return r.Milestones >= 1 })
	if out, code := e.jetrunCLI(t, false, "cancel", "cli-cancel"); code != 0 {
		t.Fatalf("jetrun cancel: exit %d: %s", code, out)
	}
	select {
	case r := <-done:
		if r.code != 4 || !strings.Contains(r.out, "aborted") {
			t.Fatalf("cancelled run: exit %d, want 4:\n%s", r.code, r.out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dispatch --wait did not return after the cancel")
	}

	if out, code := e.jetrunCLI(t, false, "dispatch", "nosuchtype", `{}`); code != 2 || !strings.Contains(out, "unknown agent type") {
		t.Fatalf("unknown agent type: exit %d: %s", code, out)
	}
	if out, code := e.jetrunCLI(t, false, "dispatch", "demo", `{not json`); code != 2 {
		t.Fatalf("bad input: exit %d: %s", code, out)
	}
}

// replay --follow prints a run's timeline, history then live, until it
// ends; get, ls, signal and clear work as documented.
func TestCLIReplayAndFriends(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "child-cli2", nil)

	if out, code := e.jetrunCLI(t, false, "dispatch", "--run-id", "tl", "demo", `{"steps":3,"stepMs":300,"approveAt":2}`); code != 0 {
		t.Fatalf("dispatch: %d %s", code, out)
	}
	replayed := make(chan string, 1)
	go func() {
		out, _ := e.jetrunCLI(t, false, "replay", "--follow", "tl")
		replayed <- out
	}()
	jetruntest.WaitRow(t, e.store, "tl", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" })
	if out, code := e.jetrunCLI(t, false, "signal", "tl", "approve", `{"approved":true}`); code != 0 || !strings.Contains(out, "signal approve sent") {
		t.Fatalf("signal: %d %s", code, out)
	}
	var timeline string
	select {
	case timeline = <-replayed:
	case <-time.After(60 * time.Second):
		t.Fatal("replay --follow did not end with the run")
	}
	lines := strings.Split(strings.TrimSpace(timeline), "\n")
	for _, want := range []string{"status     running (attempt 1", "chunk 1", "milestone  #1 step-1", "signal     approve waiting",
		"signal     approve received", "milestone  #4 step-3", "status     completed"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("timeline lacks %q:\n%s", want, timeline)
		}
	}
	if !strings.Contains(lines[len(lines)-1], "status     completed") {
		t.Errorf("the timeline does not end with the completion:\n%s", timeline)
	}

	if out, code := e.jetrunCLI(t, false, "get", "tl"); code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("get: %d %s", code, out)
	}
	if out, code := e.jetrunCLI(t, false, "ls", "--status", "completed"); code != 0 || !strings.Contains(out, "tl ") {
		t.Fatalf("ls: %d %s", code, out)
	}
	if out, code := e.jetrunCLI(t, false, "get", "--json", "tl"); code != 0 || !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("get --json: %d %s", code, out)
	}
	if out, code := e.jetrunCLI(t, false, "clear"); code != 2 {
		t.Fatalf("clear without a filter: %d %s", code, out)
	}
	if out, code := e.jetrunCLI(t, false, "clear", "--status", "completed"); code != 0 || !strings.Contains(out, "cleared 1 runs") {
		t.Fatalf("clear: %d %s", code, out)
	}
	if out, code := e.jetrunCLI(t, false, "get", "tl"); code != 1 || !strings.Contains(out, `no run "tl"`) {
		t.Fatalf("get after clear: %d %s", code, out)
	}
}
