package bench_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// profileEnv, when set, names a folder where inFlight writes a CPU profile
// of this process (the worker's) for each phase, <label>-<phase>.cpu.pprof,
// and a heap profile after the quiet window, <label>.heap.pprof.
const profileEnv = "JETRUN_BENCH_PROFILE"

// phases times the phases of a benchmark one after the other and reports
// each one's wall time and CPU, this process's and the server process's,
// per run: a cost that grows faster than the runs shows as a per-run
// figure that grows with n.
type phases struct {
	b         *testing.B
	label     string
	n         int
	serverCPU func() time.Duration
	dir       string

	name         string
	t0           time.Time
	cpu0, srvCPU time.Duration
	gc0          uint64
	prof         *os.File
}

func newPhases(b *testing.B, label string, n int, serverCPU func() time.Duration) *phases {
	return &phases{b: b, label: label, n: n, serverCPU: serverCPU, dir: os.Getenv(profileEnv)}
}

// begin ends the current phase, if any, and begins phase name.
func (p *phases) begin(name string) {
	p.end()
	p.name, p.t0, p.cpu0, p.srvCPU, p.gc0 = name, time.Now(), cpuTime(), p.serverCPU(), gcCycles()
	if p.dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(p.dir, p.file(name+".cpu.pprof")))
	if err != nil {
		p.b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		p.b.Fatal(err)
	}
	p.prof = f
}

// end ends the current phase and reports its figures.
func (p *phases) end() {
	if p.name == "" {
		return
	}
	took, cpu, srv := time.Since(p.t0), cpuTime()-p.cpu0, p.serverCPU()-p.srvCPU
	if p.prof != nil {
		pprof.StopCPUProfile()
		_ = p.prof.Close()
		p.prof = nil
	}
	perRun := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(p.n) }
	report(p.label, "phase", p.name, "s", took.Seconds(), "ms_per_run", 1000*took.Seconds()/float64(p.n),
		"worker_cpu_us_per_run", perRun(cpu), "server_cpu_us_per_run", perRun(srv),
		"worker_cpu_pct", 100*float64(cpu)/float64(took), "server_cpu_pct", 100*float64(srv)/float64(took),
		"worker_gc_cycles", gcCycles()-p.gc0, "load", loadAverage())
	p.name = ""
}

// heap writes a heap profile, when profiles are asked for.
func (p *phases) heap() {
	if p.dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(p.dir, p.file("heap.pprof")))
	if err != nil {
		p.b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if err := pprof.WriteHeapProfile(f); err != nil {
		p.b.Fatal(err)
	}
}

func (p *phases) file(suffix string) string {
	return fmt.Sprintf("%s-%s", strings.NewReplacer(" ", "_", "=", "").Replace(p.label), suffix)
}

// loadAverage is the machine's 1-minute load average, as uptime gives it:
// figures taken on a shared machine are read beside it.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// gcCycles is how many garbage collections this process completed: read
// without stopping the world.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// profileBoth starts, when profileEnv names a folder, a CPU profile of
// this process (the worker's) and, when serverURL is not empty, one of the
// server process's over the next seconds, and returns what stops the
// first and waits for the second. Each call writes files of its own,
// <name>-worker-*.cpu.pprof and <name>-server-*.cpu.pprof, so the
// iterations of a benchmark can be merged (go tool pprof takes several).
func profileBoth(b *testing.B, name, serverURL string, seconds int) (stop func()) {
	b.Helper()
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() {}
	}
	wf, err := os.CreateTemp(dir, name+"-worker-*.cpu.pprof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(wf); err != nil {
		_ = wf.Close()
		b.Fatal(err)
	}
	fetched := make(chan error, 1)
	if serverURL == "" {
		fetched <- nil
	} else {
		go func() {
			fetched <- fetchProfile(fmt.Sprintf("%s?seconds=%d", serverURL, seconds), dir, name+"-server-*.cpu.pprof")
		}()
	}
	return func() {
		pprof.StopCPUProfile()
		_ = wf.Close()
		if err := <-fetched; err != nil {
			b.Fatal(err)
		}
	}
}

// fetchProfile saves what url answers to a new file in dir named after
// pattern (os.CreateTemp).
func fetchProfile(url, dir, pattern string) error {
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("fetch the server's profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch the server's profile: %s", resp.Status)
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("save the server's profile: %w", err)
	}
	return f.Close()
}
