package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The TypeScript library's tests (sdk/js/test, node's test runner) run here
// against the binaries TestMain built: each test file starts a
// parent-worker (embedded nats-server, HTTP API) and child-workers serving
// exec children written with the library, and kills them with -9 where it
// says. make deps installs node and the library's packages (npm ci).

// repoDir is a directory of the repository, by its path from the root.
func repoDir(t *testing.T, path ...string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(append([]string{"..", "..", ".."}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// nodeTestTimeout bounds a node --test run; past it the run and every
// process it started (its process group) are killed.
const nodeTestTimeout = 8 * time.Minute

// nodeTests runs node --test over dir's test/*.test.mjs with the built
// binaries, fails with its output on a failing test, and returns how many
// tests passed. (Node 20 takes every file under a test/ directory for a
// test file, helpers and children included: the files are named.)
func nodeTests(t *testing.T, dir string, env ...string) int {
	t.Helper()
	node := interpreter(t, "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		t.Fatalf("%s has no node_modules (make deps runs npm ci there): %v", dir, err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in %s/test: %v", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=tap"}, files...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "JETRUN_BIN=" + bin}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test in %s: %v\n%s", dir, err, out)
	}
	m := regexp.MustCompile(`(?m)^# pass (\d+)$`).FindSubmatch(out)
	fails := regexp.MustCompile(`(?m)^# fail (\d+)$`).FindSubmatch(out)
	if m == nil || fails == nil || string(fails[1]) != "0" {
		t.Fatalf("node --test in %s: no summary or failures:\n%s", dir, out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestJavaScriptSDK runs sdk/js's tests: every verb of the child side
// (steps with usage, chunks, progress, milestones, wait, call, result,
// failures) and of the caller side (dispatch, await, stream resumed with
// Last-Event-ID, cancel, rerun and diff, asks and answer, dispatch over
// NATS), a kill -9 inside a step, the shared protocol fixtures, the
// README's ten-line TypeScript child and the types (tsc --noEmit).
func TestJavaScriptSDK(t *testing.T) {
	t.Parallel()
	if n := nodeTests(t, repoDir(t, "sdk", "js")); n < 26 {
		t.Fatalf("node ran %d tests in sdk/js, want at least 26", n)
	}
}

// TestJavaScriptAgents runs examples/js's tests of the durable agents on
// the Vercel AI SDK and the OpenAI Agents SDK, each with the SDK's own mock
// model: model and tool calls are steps, and a kill -9 of the worker
// mid-loop makes no stored call again (counted by the mocks).
func TestJavaScriptAgents(t *testing.T) {
	t.Parallel()
	if n := nodeTests(t, examples(t, "js")); n < 8 {
		t.Fatalf("node ran %d tests in examples/js, want at least 8", n)
	}
}
