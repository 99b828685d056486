package httpapi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

// POST /v1/runs with concurrencyKey and strategy: a queued submit answers
// 201 with status queued, a drop submit while the key is live answers 409
// key_busy, bad fields 400; the queued run starts once the key is free.
func TestConcurrencyKeyStrategies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const body = `{"agentType":"demo","runId":%q,"concurrencyKey":"session-7","strategy":%q,"input":{"steps":%d,"stepMs":100}}`
	var row model.Row
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(body, "k1", "queue", 200), &row), 201)
	jetruntest.WaitRow(t, b.store, "k1", 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })

	wantStatus(t, do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(body, "k2", "queue", 1), &row), 201)
	if row.Status != events.StatusQueued || row.ConcurrencyKey != "session-7" || row.Strategy != events.StrategyQueue {
		t.Fatalf("queued submit: %s key %q strategy %q", row.Status, row.ConcurrencyKey, row.Strategy)
	}

	var fail struct{ Code, Error string }
	resp := do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(body, "k3", "drop", 1), &fail)
	if resp.StatusCode != 409 || fail.Code != "key_busy" {
		t.Fatalf("drop while busy: %d %+v", resp.StatusCode, fail)
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/k3", "", &fail), 404)

	for _, bad := range []string{
		fmt.Sprintf(body, "k4", "sometimes", 1),
		`{"agentType":"demo","runId":"k5","strategy":"queue","input":{}}`,
		`{"agentType":"demo","runId":"k6","concurrencyKey":"session-7","strategy":"queue","debounceMs":100,"input":{}}`,
		`{"agentType":"demo","runId":"k7","concurrencyKey":"a.b","input":{}}`,
	} {
		if resp := do(t, "POST", b.url+"/v1/runs", bad, &fail); resp.StatusCode != 400 {
			t.Fatalf("%s: %d %+v; want 400", bad, resp.StatusCode, fail)
		}
	}

	wantStatus(t, do(t, "POST", b.url+"/v1/runs/k1/cancel", "", &row), 200)
	for id, want := range map[string]events.Status{"k1": events.StatusAborted, "k2": events.StatusCompleted} {
		if r := jetruntest.WaitRow(t, b.store, id, 30*time.Second, jetruntest.Final); r.Status != want {
			t.Fatalf("%s ended %s, want %s", id, r.Status, want)
		}
	}
	debounced := `{"agentType":"demo","runId":"k8","concurrencyKey":"session-7","strategy":"debounce","debounceMs":50,"input":{"steps":1,"stepMs":0}}`
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", debounced, &row), 201)
	if row.Strategy != events.StrategyDebounce || row.DebounceMs != 50 {
		t.Fatalf("debounce submit: %s %d", row.Status, row.DebounceMs)
	}
	if r := jetruntest.WaitRow(t, b.store, "k8", 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
		t.Fatalf("k8 ended %s", r.Status)
	}
}
