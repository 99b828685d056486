package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/agents/demo"
	"github.com/jetrun/jetrun/internal/httpapi"
	"github.com/jetrun/jetrun/internal/jetruntest"
	"github.com/jetrun/jetrun/internal/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	url   string
	store *kv.Store
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	w, err := worker.New(nc, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle(demo.AgentType, demo.Handler())
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	client, err := parent.New(context.Background(), nc, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Client: client, Conn: nc}))
	t.Cleanup(srv.Close)
	return &bundle{url: srv.URL, store: client.Store()}
}

// do sends a request and decodes the JSON response into out (if not nil).
func do(t *testing.T, method, url, body string, out any) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp
}

func wantStatus(t *testing.T, resp *http.Response, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d", resp.Request.Method, resp.Request.URL, resp.StatusCode, want)
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var body map[string]string
	wantStatus(t, do(t, "GET", b.url+"/healthz", "", &body), 200)
	if body["nats"] != "connected" {
		t.Fatalf("healthz = %v", body)
	}
}

func TestDispatchGetAndWait(t *testing.T) {
	t.Parallel()
	b := setup(t)

	var row kv.Run
	resp := do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"h1","input":{"steps":2,"stepMs":10}}`, &row)
	wantStatus(t, resp, 201)
	if row.ID != "h1" || row.Status != events.StatusStarting || resp.Header.Get("Location") != "/v1/runs/h1" {
		t.Fatalf("row = %+v, location %q", row, resp.Header.Get("Location"))
	}
	jetruntest.WaitRow(t, b.store, "h1", 10*time.Second, jetruntest.Final)
	// The same id again: the existing run, not a new one.
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"h1","input":{"steps":9}}`, &row), 200)
	if row.Status != events.StatusCompleted {
		t.Fatalf("re-dispatch returned %s", row.Status)
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/h1", "", &row), 200)
	if row.Summary != "finished 2 steps" {
		t.Fatalf("get = %+v", row)
	}

	var ok struct {
		OK      bool   `json:"ok"`
		RunID   string `json:"runId"`
		Status  string `json:"status"`
		Summary string `json:"summary"`
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs?wait=true", `{"agentType":"demo","input":{"steps":1,"stepMs":0}}`, &ok), 200)
	if !ok.OK || ok.Status != "completed" || ok.Summary != "finished 1 steps" || ok.RunID == "" {
		t.Fatalf("wait = %+v", ok)
	}
	var failed parent.Failure
	wantStatus(t, do(t, "POST", b.url+"/v1/runs?wait=true", `{"agentType":"demo","input":{"steps":1,"stepMs":0,"failAt":1}}`, &failed), 200)
	if failed.OK || failed.Status != events.StatusError || failed.Retryable || !strings.Contains(failed.Message, "step 1 failed") {
		t.Fatalf("failure = %+v", failed)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, body string
		status     int
		code       string
	}{
		{"malformed JSON", `{"agentType":`, 400, "bad_request"},
		{"not an object", `[1]`, 400, "bad_request"},
		{"no input", `{"agentType":"demo"}`, 400, "bad_request"},
		{"null input", `{"agentType":"demo","input":null}`, 400, "bad_request"},
		{"bad run id", `{"agentType":"demo","runId":"a.b","input":1}`, 400, "bad_request"},
		{"long run id", `{"agentType":"demo","runId":"` + strings.Repeat("x", 65) + `","input":1}`, 400, "bad_request"},
		{"bad agent type", `{"agentType":"de mo","input":1}`, 400, "bad_request"},
		{"unknown agent type", `{"agentType":"nosuch","input":1}`, 422, "unknown_agent_type"},
		{"trailing data", `{"agentType":"demo","input":1} {}`, 400, "bad_request"},
		{"oversize", `{"agentType":"demo","input":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`, 413, "too_large"},
		{"input over the limit", `{"agentType":"demo","input":"` + strings.Repeat("x", events.MaxInputBytes) + `"}`, 400, "bad_request"},
	}
	for _, tt := range tests {
		var body struct{ Error, Code string }
		resp := do(t, "POST", b.url+"/v1/runs", tt.body, &body)
		if resp.StatusCode != tt.status || body.Code != tt.code || body.Error == "" {
			t.Errorf("%s: %d %+v, want %d %s", tt.name, resp.StatusCode, body, tt.status, tt.code)
		}
	}
	var body struct{ Error string }
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?status=bogus", "", &body), 400)
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?limit=0", "", &body), 400)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs?wait=maybe", `{"agentType":"demo","input":1}`, &body), 400)
}

// A guessed or malformed id gets a 404 and creates nothing.
func TestUnknownIDsAre404AndCreateNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{
		"/v1/runs/guess", "/v1/runs/a.b", "/v1/runs/%2A", "/v1/runs/%3E", "/v1/runs/" + strings.Repeat("y", 65),
	} {
		var body struct{ Code string }
		wantStatus(t, do(t, "GET", b.url+path, "", &body), 404)
		wantStatus(t, do(t, "POST", b.url+path+"/cancel", "", &body), 404)
	}
	rows, err := b.store.List(context.Background(), nil)
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows after lookups: %d %v", len(rows), err)
	}
}

func TestListAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"quick","input":{"steps":1,"stepMs":0}}`, nil)
	jetruntest.WaitRow(t, b.store, "quick", 10*time.Second, jetruntest.Final)
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"slow","input":{"steps":100,"stepMs":100}}`, nil)
	jetruntest.WaitRow(t, b.store, "slow", 10*time.Second, func(r *kv.Run) bool { return r.Status == events.StatusRunning })

	var list struct {
		Runs  []kv.Run `json:"runs"`
		Total int      `json:"total"`
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?status=running", "", &list), 200)
	if list.Total != 1 || list.Runs[0].ID != "slow" {
		t.Fatalf("running = %+v", list)
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?limit=1", "", &list), 200)
	if list.Total != 2 || len(list.Runs) != 1 || list.Runs[0].ID != "slow" {
		t.Fatalf("newest first, limited: %+v", list)
	}

	var row kv.Run
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/slow/cancel", `{"reason":"from the API"}`, &row), 200)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/slow/cancel", ``, &row), 200) // idempotent
	final := jetruntest.WaitRow(t, b.store, "slow", 10*time.Second, jetruntest.Final)
	if final.Status != events.StatusAborted || !strings.Contains(final.Error, "from the API") {
		t.Fatalf("after cancel: %+v", final)
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/quick/cancel", "", &row), 200)
	if row.Status != events.StatusCompleted {
		t.Fatalf("cancel rewrote a completed run: %s", row.Status)
	}
}

func TestClearAndConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var body struct{ Code string }
	wantStatus(t, do(t, "DELETE", b.url+"/v1/runs", "", &body), 400) // no filter
	wantStatus(t, do(t, "DELETE", b.url+"/v1/runs?olderThan=soon", "", &body), 400)

	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"c1","input":{"steps":1,"stepMs":0}}`, nil)
	jetruntest.WaitRow(t, b.store, "c1", 10*time.Second, jetruntest.Final)
	var cleared struct{ Cleared int }
	wantStatus(t, do(t, "DELETE", b.url+"/v1/runs?status=completed", "", &cleared), 200)
	if cleared.Cleared != 1 {
		t.Fatalf("cleared %d", cleared.Cleared)
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/c1", "", &body), 404)

	slow := `{"agentType":"demo","runId":"%s","parent":"p","depth":1,"maxConcurrent":1,"input":{"steps":50,"stepMs":100}}`
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(slow, "s1"), nil), 201)
	resp := do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(slow, "s2"), &body)
	if resp.StatusCode != 429 || body.Code != "concurrency_limit" {
		t.Fatalf("over the cap: %d %+v", resp.StatusCode, body)
	}
}
