package e2e_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// bin holds the binaries TestMain built.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jetrun-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/jetrun/jetrun/cmd/...", "github.com/jetrun/jetrun/internal/testkit/e2e/cmd/...",
		"github.com/nats-io/nats-server/v2")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build binaries:", err)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a binary running as a child process of the test.
type proc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// start runs a built binary with env (on top of a minimal environment).
// The process is killed with SIGKILL at cleanup if it still runs.
func start(t testing.TB, name string, env map[string]string, args ...string) *proc {
	t.Helper()
	return startIn(t, t.TempDir(), name, env, args...)
}

// startIn is start with dir as the working directory.
func startIn(t testing.TB, dir, name string, env map[string]string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = dir
	p := &proc{t: t, name: name, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s (pid %d) stdout:\n%s\nstderr:\n%s", name, cmd.Process.Pid, p.stdout, p.stderr)
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s: %v", p.name, err)
	}
}

// wait waits for the process to exit and returns its exit error.
func (p *proc) wait(timeout time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %s; stderr:\n%s", p.name, timeout, p.stderr)
		return nil
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitLog waits until the process's stderr has a line containing s.
func (p *proc) waitLog(s string, timeout time.Duration) {
	p.t.Helper()
	natstest.Eventually(p.t, timeout, func() bool {
		if p.exited() {
			p.t.Fatalf("%s exited before logging %q: %v\nstderr:\n%s", p.name, s, p.err, p.stderr)
		}
		return strings.Contains(p.stderr.String(), s)
	}, "%s did not log %q; stderr:\n%s", p.name, s, p.stderr)
}

// waitOut waits until the process's stdout contains s. Stdout and stderr
// are two pipes: a line written to stdout before a log line may be read
// after it.
func (p *proc) waitOut(s string, timeout time.Duration) {
	p.t.Helper()
	natstest.Eventually(p.t, timeout, func() bool {
		return strings.Contains(p.stdout.String(), s)
	}, "%s did not print %q; stdout:\n%s", p.name, s, p.stdout)
}

// lines returns stdout's lines.
func (p *proc) lines() []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
