package bench_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// serverProcess builds nats-server (the version go.mod pins) and runs it as
// a process of its own on 127.0.0.1 with JetStream at its default limits,
// as a deployment runs it; it is killed, by its pid, at cleanup. It returns
// a connection to it over TCP and the server process's CPU so far.
func serverProcess(b *testing.B) (*nats.Conn, func() time.Duration) {
	b.Helper()
	sp := startServerProcess(b)
	return sp.nc, sp.cpu
}

// serverProc is a nats-server process serverProcess started.
type serverProc struct {
	nc  *nats.Conn
	cpu func() time.Duration // its CPU so far
	// profileURL serves its CPU profiles (/debug/pprof/profile), when
	// profileEnv asks for profiles; empty otherwise.
	profileURL string
}

// startServerProcess is serverProcess; when profileEnv names a folder, the
// server also serves its profiles on a port of its own.
func startServerProcess(b *testing.B) serverProc {
	b.Helper()
	dir := b.TempDir()
	exe := filepath.Join(dir, "nats-server")
	build := exec.Command("go", "build", "-o", exe, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build nats-server: %v\n%s", err, out)
	}
	port := natstest.FreePort(b)
	var logs bytes.Buffer
	args := []string{"-js", "-sd", filepath.Join(dir, "store"), "-a", "127.0.0.1", "-p", strconv.Itoa(port)}
	var profileURL string
	if os.Getenv(profileEnv) != "" {
		pp := natstest.FreePort(b)
		args = append(args, "-profile", strconv.Itoa(pp))
		profileURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile", pp)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatalf("start nats-server: %v", err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	natstest.Eventually(b, 10*time.Second, func() bool {
		var err error
		nc, err = nats.Connect(url)
		return err == nil
	}, "nats-server on %s did not take connections; its log:\n%s", url, &logs)
	b.Cleanup(nc.Close)
	pid := cmd.Process.Pid
	return serverProc{nc: nc, cpu: func() time.Duration { return processCPU(b, pid) }, profileURL: profileURL}
}

// processCPU is the user and system CPU process pid used so far, read from
// /proc/<pid>/stat (in clock ticks of 10 ms, the Linux default).
func processCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("read the CPU of process %d: %v", pid, err)
	}
	// The command name, in parentheses, may hold spaces: count the fields
	// after its closing parenthesis (utime and stime are fields 14 and 15).
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(fields) < 13 {
		b.Fatalf("process %d: short /proc stat %q", pid, raw)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatalf("process %d: /proc stat field %q: %v", pid, f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
