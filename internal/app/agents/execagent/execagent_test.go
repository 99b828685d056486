package execagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "fixture-child" { // the fixture test's child (fixtures_test.go)
		os.Exit(replayFixtureChild(os.Args[2]))
	}
	goleak.VerifyTestMain(m)
}

// setup serves each exec agent type of cmds (name → command) on a real
// server.
func setup(t *testing.T, cmds map[string]execagent.Config) (*parent.Client, *runstore.Store, func(id string) []jetruntest.Event) {
	t.Helper()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	w, err := agents.StartPool(context.Background(), rt, worker.Config{}, nil, agents.Configured{Exec: cmds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return client, engine.From(rt).Store(), func(id string) []jetruntest.Event { return jetruntest.ReadEvents(t, js, id) }
}

func script(name string, args ...string) execagent.Config {
	path, _ := filepath.Abs(filepath.Join("testdata", name))
	return execagent.Config{Path: path, Args: args}
}

func run(t *testing.T, client *parent.Client, store *runstore.Store, agentType, id string) *model.Row {
	t.Helper()
	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: agentType, RunID: id, Input: map[string]string{"q": "x"}}); err != nil {
		t.Fatal(err)
	}
	return jetruntest.WaitRow(t, store, id, 30*time.Second, jetruntest.Final)
}

func chunks(evs []jetruntest.Event) string {
	var b strings.Builder
	for _, c := range jetruntest.Chunks(evs) {
		b.Write(c.Data)
	}
	return b.String()
}

func TestScriptStreamsEventsAndReturnsItsResult(t *testing.T) {
	t.Parallel()
	client, store, evs := setup(t, map[string]execagent.Config{"steps": script("steps.sh")})
	row := run(t, client, store, "steps", "s1")
	if row.Status != events.StatusCompleted || row.Summary != "all done" || string(row.Output) != `{"ok":true}` {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
	got := evs("s1")
	if c := chunks(got); c != `"hello from s1\n""second line\n"` {
		t.Fatalf("chunks %s", c)
	}
	if ms := jetruntest.Milestones(got); len(ms) != 1 || ms[0].Name != "halfway" {
		t.Fatalf("milestones %+v", ms)
	}
	if row.Progress == nil || row.Progress.Fraction != 0.5 {
		t.Fatalf("progress %+v", row.Progress)
	}
}

func TestPlainOutputIsTheResult(t *testing.T) {
	t.Parallel()
	client, store, _ := setup(t, map[string]execagent.Config{"plain": script("plain.sh")})
	row := run(t, client, store, "plain", "p1")
	if row.Status != events.StatusCompleted || row.Summary != "the last line" || string(row.Output) != `"one\ntwo\nthe last line\n"` {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
}

func TestNonZeroExitEndsErrorWithTheStderrTail(t *testing.T) {
	t.Parallel()
	client, store, _ := setup(t, map[string]execagent.Config{"fail": script("fail.sh")})
	row := run(t, client, store, "fail", "f1")
	if row.Status != events.StatusError || !strings.Contains(row.Error, "exit status 3") ||
		!strings.HasSuffix(row.Error, "disk full: cannot write /tmp/x") {
		t.Fatalf("row: %s %q", row.Status, row.Error)
	}
}

func TestBadEventLineStopsTheCommand(t *testing.T) {
	t.Parallel()
	client, store, _ := setup(t, map[string]execagent.Config{"bad": script("badline.sh")})
	row := run(t, client, store, "bad", "b1")
	if row.Status != events.StatusError || !strings.Contains(row.Error, "line 3") || !strings.Contains(row.Error, "not valid JSON") {
		t.Fatalf("row: %s %q", row.Status, row.Error)
	}
}

func TestWaitGetsTheSignalOnStdin(t *testing.T) {
	t.Parallel()
	client, store, _ := setup(t, map[string]execagent.Config{"wait": script("wait.sh")})
	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "wait", RunID: "w1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, store, "w1", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "go" })
	if _, err := client.Signal(context.Background(), "w1", "go", map[string]int{"speed": 3}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "w1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Summary != "signalled" ||
		string(row.Output) != `{"signal":{"name":"go","payload":{"speed":3}}}` {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
}

// A cancel stops the command's whole process group: the command and what
// it started are gone, even when the command ignores SIGTERM.
func TestCancelKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"polite", "stubborn"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pids := filepath.Join(t.TempDir(), "pids")
			cfg := script("long.sh", pids, mode)
			cfg.Grace = 300 * time.Millisecond
			client, store, _ := setup(t, map[string]execagent.Config{"long": cfg})
			if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "long", RunID: "l1", Input: 1}); err != nil {
				t.Fatal(err)
			}
			jetruntest.WaitRow(t, store, "l1", 30*time.Second, func(r *model.Row) bool { return r.Chunks > 0 })
			procs := readPids(t, pids)
			for _, pid := range procs {
				if !alive(pid) {
					t.Fatalf("pid %d is not running before the cancel", pid)
				}
			}
			if _, err := client.Cancel(context.Background(), "l1", "enough"); err != nil {
				t.Fatal(err)
			}
			row := jetruntest.WaitRow(t, store, "l1", 30*time.Second, jetruntest.Final)
			if row.Status != events.StatusAborted {
				t.Fatalf("row: %s %q", row.Status, row.Error)
			}
			natstest.Eventually(t, 10*time.Second, func() bool { return !alive(procs[0]) && !alive(procs[1]) },
				"the command %d and its child %d are still running after the cancel", procs[0], procs[1])
		})
	}
}

// A command that exits leaves nothing behind in its process group.
func TestExitKillsLeftovers(t *testing.T) {
	t.Parallel()
	pids := filepath.Join(t.TempDir(), "pids")
	client, store, _ := setup(t, map[string]execagent.Config{"left": script("leftover.sh", pids)})
	row := run(t, client, store, "left", "x1")
	if row.Status != events.StatusCompleted || row.Summary != "left one behind" {
		t.Fatalf("row: %s %q (%s)", row.Status, row.Summary, row.Error)
	}
	pid := readPids(t, pids)[0]
	natstest.Eventually(t, 10*time.Second, func() bool { return !alive(pid) }, "the leftover %d still runs", pid)
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	var data []byte
	natstest.Eventually(t, 10*time.Second, func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil
	}, "no pid file %s", path)
	var out []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

// alive says whether pid runs. A zombie whose parent is not this process
// (an orphan reparented to init, waiting for it to reap) does not run.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ppid ...
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) >= 2 && fields[0] == "Z" {
		ppid, _ := strconv.Atoi(fields[1])
		return ppid == os.Getpid() // our own zombie would be a leak
	}
	return true
}

// A call line makes a durable call to the run's caller; the reply comes on
// stdin.
func TestCallGetsTheReplyOnStdin(t *testing.T) {
	t.Parallel()
	client, store, _ := setup(t, map[string]execagent.Config{"caller": script("call.sh")})
	srv, err := client.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleFunc("ask", func(_ context.Context, call *parent.Call) (any, error) {
		return map[string]string{"colour": "blue", "asked": string(call.Input)}, nil
	})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "caller", RunID: "c1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "c1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted ||
		string(row.Output) != `{"reply":{"name":"ask","output":{"asked":"{\"q\":\"colour?\"}","colour":"blue"}}}` {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
}

// Plain output full of quotes grows when encoded as a JSON string: the
// kept tail is cut to fit the output limit once encoded, so a run that did
// all its work completes (issue 23: it ended "error", "output is 310117
// bytes; the limit is 262144").
func TestPlainOutputTailFitsTheLimitOnceEncoded(t *testing.T) {
	t.Parallel()
	client, store, _ := setup(t, map[string]execagent.Config{"quotes": script("quotes.sh", "20000")})
	row := run(t, client, store, "quotes", "q1")
	if row.Status != events.StatusCompleted {
		t.Fatalf("row: %s (%s)", row.Status, row.Error)
	}
	if len(row.Output) > events.MaxOutputBytes {
		t.Fatalf("output is %d bytes, over the limit %d", len(row.Output), events.MaxOutputBytes)
	}
	var tail string
	if err := json.Unmarshal(row.Output, &tail); err != nil {
		t.Fatalf("output %.80s…: %v", row.Output, err)
	}
	if !strings.HasSuffix(tail, "{\"chunk\": \"token 19999 \"}\n{\"chunk\": \"token 20000 \"}\n") ||
		len(row.Output) < events.MaxOutputBytes-1<<10 {
		t.Fatalf("output keeps %d bytes (%d encoded), ending %q; want the tail, up to the limit",
			len(tail), len(row.Output), tail[max(len(tail)-60, 0):])
	}
	if row.Summary != "{\"chunk\": \"token 20000 \"}" {
		t.Fatalf("summary %q", row.Summary)
	}
}
