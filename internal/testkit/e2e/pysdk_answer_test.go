package e2e_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// The Python caller answers an ask (GET /v1/asks, POST
// /v1/asks/{id}:answer) that a Python child's wait made, against a real
// parent-worker: the run resumes with the answer's value, and a second
// answer is refused with 409.
func TestPythonCallerAnswersAnAsk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	py := python3(t)
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_NATS_URL":    e.url,
		"JETRUN_WORKER_ID":   "py-answer",
		"JETRUN_HTTP_ADDR":   addr,
		"JETRUN_EXEC_AGENTS": "py-child=" + py + " " + filepath.Join(sdkPython(t), "tests", "live_child.py"),
		"PYTHONPATH":         sdkPython(t),
		"JETRUN_LOG_LEVEL":   "debug",
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	caller := startProgram(t, py, map[string]string{"PYTHONPATH": sdkPython(t), "PYTHONDONTWRITEBYTECODE": "1"},
		filepath.Join(sdkPython(t), "tests", "live_answer.py"), "http://"+addr)
	if err := caller.wait(120 * time.Second); err != nil {
		t.Fatalf("live_answer.py: %v\n%s%s", err, caller.stdout, caller.stderr)
	}
	var a map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(caller.stdout.String())), &a); err != nil {
		t.Fatalf("live_answer.py printed %q: %v", caller.stdout, err)
	}
	row := jetruntest.WaitRow(t, e.store, "py-ask", 10*time.Second, jetruntest.Final)
	if a["status"] != "answered" || a["by"] != "py-test" || fmt.Sprint(a["value"]) != "map[approved:true]" || a["second"] != float64(409) {
		t.Errorf("answered %v", a)
	}
	if a["run"] != "completed" || row.Status != events.StatusCompleted || row.Summary != "approved" || string(row.Output) != `{"approved":true}` ||
		a["summary"] != row.Summary {
		t.Errorf("answered %v; row %s %q %s (%s)", a, row.Status, row.Summary, row.Output, row.Error)
	}
}
