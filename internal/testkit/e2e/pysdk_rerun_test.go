package e2e_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The Python caller re-runs a Python agent from a step (POST
// /v1/runs/{id}:rerun: the fork makes the calls from that step only,
// counted by the agent's ledger) and compares the two runs (GET
// /v1/runs/{a}/diff/{b}), against a real parent-worker.
func TestPythonCallerReruns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	py := python3(t)
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_NATS_URL":    e.url,
		"JETRUN_WORKER_ID":   "py-rerun",
		"JETRUN_HTTP_ADDR":   addr,
		"JETRUN_EXEC_AGENTS": "agent-py=" + py + " " + examples(t, "python", "agent.py"),
		"JETRUN_LOG_LEVEL":   "debug",
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	dir := t.TempDir()
	first, again := filepath.Join(dir, "first"), filepath.Join(dir, "again")
	caller := startProgram(t, py, map[string]string{"PYTHONPATH": sdkPython(t), "PYTHONDONTWRITEBYTECODE": "1"},
		filepath.Join(sdkPython(t), "tests", "live_rerun.py"), "http://"+addr, first, again)
	if err := caller.wait(120 * time.Second); err != nil {
		t.Fatalf("live_rerun.py: %v\n%s%s", err, caller.stdout, caller.stderr)
	}
	said := make(map[string]map[string]any)
	sc := bufio.NewScanner(strings.NewReader(caller.stdout.String()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("live_rerun.py printed a non-JSON line %q", sc.Text())
		}
		said[l["what"].(string)] = l
	}

	row := jetruntest.WaitRow(t, e.store, "py-fork", 10*time.Second, jetruntest.Final)
	r := said["rerun"]
	if r == nil || r["id"] != "py-fork" || r["status"] != "completed" || row.ForkedFrom == nil || row.ForkedFrom.RunID != "py-orig" {
		t.Errorf("rerun %v; row %s forked from %+v", r, row.Status, row.ForkedFrom)
	}
	if got := fmt.Sprint(r["diff"]); got != "[[think-1 equal] [think-2 equal] [think-3 equal] [think-4 equal]]" {
		t.Errorf("diff %s", got)
	}
	calls := func(ledger string) []string {
		var names []string
		for _, l := range counterLines(t, ledger) {
			if strings.HasPrefix(l, "think-") {
				names = append(names, l)
			}
		}
		return names
	}
	if got := calls(first); !slices.Equal(got, []string{"think-1", "think-2", "think-3", "think-4"}) {
		t.Errorf("the original made calls %v", got)
	}
	if got := calls(again); !slices.Equal(got, []string{"think-3", "think-4"}) {
		t.Errorf("the re-run from think-3 made calls %v, want think-3 and think-4", got)
	}
	if b := said["rerun-bad"]; b == nil || b["status"] != float64(422) || b["code"] != "step_not_stored" {
		t.Errorf("a re-run from a step never stored: %v", b)
	}
}
