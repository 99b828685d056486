package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	url   string
	store *runstore.Store
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, nil)
}

func setupWith(t *testing.T, tokens map[string]httpapi.Role) *bundle {
	t.Helper()
	return setupServing(t, tokens, func(w *worker.Worker) { w.Handle(demo.AgentType, demo.Handler()) })
}

// setupServing starts a worker whose handlers register adds, and the API
// in front of a parent client and a run view.
func setupServing(t *testing.T, tokens map[string]httpapi.Role, register func(w *worker.Worker)) *bundle {
	t.Helper()
	return setupConfig(t, func(c *httpapi.Config) { c.Tokens = tokens }, register)
}

// setupConfig is setupServing with the API's configuration changed by mod.
func setupConfig(t *testing.T, mod func(*httpapi.Config), register func(w *worker.Worker)) *bundle {
	t.Helper()
	env := jetruntest.NewEnv(t)
	env.StartWorker(t, worker.Config{}, register)
	view, err := runview.Start(context.Background(), env.Runtime, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Stop)
	cfg := httpapi.Config{Client: env.Client, View: view, Conn: env.Conn}
	mod(&cfg)
	srv := httptest.NewServer(httpapi.New(cfg))
	t.Cleanup(srv.Close)
	return &bundle{url: srv.URL, store: env.Store}
}

// do sends a request (a write as JSON) and decodes the JSON response into
// out (if not nil).
func do(t *testing.T, method, url, body string, out any) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
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

// /healthz says 503 with the reason while JetStream does not answer
// (JetStream disabled on a running server), and while the server is gone.
func TestHealthzWhileJetStreamIsUnavailable(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Conn: nc}))
	defer srv.Close()
	health := func() (int, map[string]string) {
		var body map[string]string
		resp := do(t, "GET", srv.URL+"/healthz", "", &body)
		return resp.StatusCode, body
	}
	if code, body := health(); code != 200 || body["jetstream"] != "ok" {
		t.Fatalf("healthz = %d %v", code, body)
	}
	if err := ns.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	// The answer is cached for a couple of seconds: poll.
	var body map[string]string
	natstest.Eventually(t, 10*time.Second, func() bool {
		var code int
		code, body = health()
		return code == 503
	}, "healthz did not become 503 without JetStream")
	if body["status"] != "degraded" || body["jetstream"] != "unavailable" || body["reason"] == "" {
		t.Fatalf("healthz without JetStream = %v", body)
	}
	t.Logf("without JetStream: %v", body)
	ns.Shutdown()
	ns.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, func() bool {
		code, b := health()
		body = b
		return code == 503 && b["nats"] == "disconnected"
	}, "healthz did not say disconnected")
	if body["reason"] == "" {
		t.Fatalf("healthz with the server gone = %v", body)
	}
}

func TestDispatchGetAndWait(t *testing.T) {
	t.Parallel()
	b := setup(t)

	var row model.Row
	resp := do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"h1","input":{"steps":2,"stepMs":10}}`, &row)
	wantStatus(t, resp, 201)
	// A fast worker may have claimed it before the answer: starting or running.
	if row.ID != "h1" || row.Status.Final() || resp.Header.Get("Location") != "/v1/runs/h1" {
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
	if !ok.OK || ok.Status != "completed" || ok.Summary != "finished 1 step" || ok.RunID == "" {
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
	jetruntest.WaitRow(t, b.store, "slow", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })

	var list struct {
		Runs  []model.Row `json:"runs"`
		Total int         `json:"total"`
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?status=running", "", &list), 200)
	if list.Total != 1 || list.Runs[0].ID != "slow" {
		t.Fatalf("running = %+v", list)
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?limit=1", "", &list), 200)
	if list.Total != 2 || len(list.Runs) != 1 || list.Runs[0].ID != "slow" {
		t.Fatalf("newest first, limited: %+v", list)
	}

	var row model.Row
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

// Runs and summaries carry the server's rules as flags ("live", "final"), so
// the web UI does not re-derive them from the status.
func TestRunsCarryLiveAndFinalFlags(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type flags struct {
		ID     string        `json:"id"`
		Status events.Status `json:"status"`
		Live   *bool         `json:"live"`
		Final  *bool         `json:"final"`
	}
	check := func(what string, got flags, live, final bool) {
		t.Helper()
		if got.Live == nil || got.Final == nil || *got.Live != live || *got.Final != final {
			t.Fatalf("%s: %+v (live %v final %v), want live %v final %v", what, got, got.Live, got.Final, live, final)
		}
	}
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"slow","input":{"steps":100,"stepMs":100}}`, nil)
	jetruntest.WaitRow(t, b.store, "slow", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	var row flags
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/slow", "", &row), 200)
	check("running row", row, true, false)
	var list struct {
		Runs []flags `json:"runs"`
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?status=running", "", &list), 200)
	if len(list.Runs) != 1 {
		t.Fatalf("running = %+v", list)
	}
	check("running summary", list.Runs[0], true, false)

	wantStatus(t, do(t, "POST", b.url+"/v1/runs/slow/cancel", `{"reason":"enough"}`, &row), 200)
	jetruntest.WaitRow(t, b.store, "slow", 10*time.Second, jetruntest.Final)
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/slow", "", &row), 200)
	check("aborted row", row, false, true)
	natstest.Eventually(t, 10*time.Second, func() bool {
		do(t, "GET", b.url+"/v1/runs?status=aborted", "", &list)
		return len(list.Runs) == 1
	}, "the aborted run is not listed")
	check("aborted summary", list.Runs[0], false, true)
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

	// A runs budget in the body: the child past it is refused.
	wantStatus(t, do(t, "POST", b.url+"/v1/runs",
		`{"agentType":"demo","runId":"bud","budget":{"runs":1},"input":{"steps":50,"stepMs":100}}`, nil), 201)
	kid := `{"agentType":"demo","runId":"%s","parent":"bud","depth":1,"input":{"steps":1,"stepMs":0}}`
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(kid, "bud-1"), nil), 201)
	resp = do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(kid, "bud-2"), &body)
	if resp.StatusCode != 409 || body.Code != "budget_exceeded" {
		t.Fatalf("past the runs budget: %d %+v", resp.StatusCode, body)
	}
	if row, _, err := b.store.Get(context.Background(), "bud-1"); err != nil || row.Root != "bud" || len(row.BudgetFrom) != 1 {
		t.Fatalf("child row %+v %v", row, err)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, event, data string
}

// readSSE reads events from an event stream until stop returns true or the
// stream ends.
func readSSE(t *testing.T, url, lastEventID string, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Error(err) // not Fatal: callers may run in a goroutine
		return nil
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Errorf("GET %s: %d %s", url, resp.StatusCode, ct)
		return nil
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

func TestEventStreamReplaysThenResumesByLastEventID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"sse","input":{"steps":3,"stepMs":100}}`, nil)

	all := readSSE(t, b.url+"/v1/runs/sse/events", "", nil) // follows until the run ends
	var ids []string
	kinds := map[string]int{}
	for _, e := range all {
		kinds[e.event]++
		if e.id != "" {
			ids = append(ids, e.id)
		}
	}
	if all[len(all)-1].event != "end" || kinds["caught-up"] != 1 || kinds["chunk"] != 3 || kinds["milestone"] != 3 || kinds["status"] != 2 {
		t.Fatalf("events: %v", kinds)
	}
	var first struct {
		Seq  uint64 `json:"seq"`
		Kind string `json:"kind"`
		Data struct {
			Status string `json:"status"`
		} `json:"data"`
	}
	i := 0
	for all[i].id == "" { // "caught-up" comes first if the stream opened before the run's first event
		i++
	}
	if err := json.Unmarshal([]byte(all[i].data), &first); err != nil || first.Kind != "status" || first.Data.Status != "running" || fmt.Sprint(first.Seq) != all[i].id {
		t.Fatalf("first event %+v (%v)", all[i], err)
	}
	// Resume after the third event: exactly the rest, no gap, no duplicate.
	rest := readSSE(t, b.url+"/v1/runs/sse/events", ids[2], nil)
	var restIDs []string
	for _, e := range rest {
		if e.id != "" {
			restIDs = append(restIDs, e.id)
		}
	}
	if fmt.Sprint(restIDs) != fmt.Sprint(ids[3:]) {
		t.Fatalf("resumed ids %v, want %v", restIDs, ids[3:])
	}
	history := readSSE(t, b.url+"/v1/runs/sse/events?follow=false&after="+ids[len(ids)-2], "", nil)
	if len(history) != 3 || history[0].id != ids[len(ids)-1] || history[2].event != "end" {
		t.Fatalf("history-only tail: %+v", history)
	}
	var body struct{ Code string }
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/nope/events", "", &body), 404)
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/a.b/events", "", &body), 404)
}

func TestLiveStreamAndSignals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan []sseEvent, 1)
	subscribed := make(chan struct{})
	go func() {
		got <- readSSE(t, b.url+"/v1/runs/live", "", func(e sseEvent) bool {
			if e.event == "hello" {
				close(subscribed)
			}
			return e.event == "run" && strings.Contains(e.data, `"id":"ask"`) && strings.Contains(e.data, `"status":"completed"`)
		})
	}()
	<-subscribed
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"ask","input":{"steps":2,"stepMs":10,"approveAt":1}}`, nil)
	row := jetruntest.WaitRow(t, b.store, "ask", 10*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" })
	if row.Status != events.StatusRunning {
		t.Fatalf("row %+v", row)
	}
	var body struct {
		Seq  uint64
		Code string
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/ask/signals/a.b", `{}`, &body), 400)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/ghost/signals/approve", `{}`, &body), 404)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/ask/signals/approve", `{"approved":`, &body), 400)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/ask/signals/approve", `{"approved":true}`, &body), 202)
	if body.Seq == 0 {
		t.Fatal("no signal sequence")
	}
	jetruntest.WaitRow(t, b.store, "ask", 10*time.Second, jetruntest.Final)
	select {
	case evs := <-got:
		var sawWaiting bool
		for _, e := range evs {
			sawWaiting = sawWaiting || (e.event == "run" && strings.Contains(e.data, `"waitingFor":"approve"`))
		}
		if !sawWaiting {
			t.Fatalf("the live stream never showed the run waiting: %d events", len(evs))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the live stream never showed the run completed")
	}
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 5 {
		do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(`{"agentType":"demo","runId":"k%d","parent":"boss","depth":1,"input":{"steps":1,"stepMs":0}}`, i), nil)
	}
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"loner","input":{"steps":1,"stepMs":0}}`, nil)
	var page struct {
		Runs  []model.Row
		Total int
		Next  string
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?parent=boss&limit=2", "", &page), 200)
	seen := map[string]bool{}
	for n := 0; ; n++ {
		if page.Total != 5 || len(page.Runs) > 2 {
			t.Fatalf("page %d: %+v", n, page)
		}
		for _, r := range page.Runs {
			if r.Parent != "boss" || seen[r.ID] {
				t.Fatalf("page %d repeats or strays: %s", n, r.ID)
			}
			seen[r.ID] = true
		}
		if page.Next == "" {
			break
		}
		next := page.Next
		page.Runs, page.Next = nil, ""
		wantStatus(t, do(t, "GET", b.url+"/v1/runs?parent=boss&limit=2&cursor="+next, "", &page), 200)
	}
	if len(seen) != 5 {
		t.Fatalf("paged through %d of 5 runs", len(seen))
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?agentType=demo", "", &page), 200)
	if page.Total != 6 {
		t.Fatalf("agent type filter: %d", page.Total)
	}
	var body struct{ Code string }
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?cursor=garbage!", "", &body), 400)
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?parent=a.b", "", &body), 400)
}

// A client that reconnects after the run's last event gets "end" at once.
func TestEventStreamResumedAfterTheEndEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"over","input":{"steps":1,"stepMs":0}}`, nil)
	all := readSSE(t, b.url+"/v1/runs/over/events", "", nil)
	last := ""
	for _, e := range all {
		if e.id != "" {
			last = e.id
		}
	}
	again := readSSE(t, b.url+"/v1/runs/over/events", last, nil)
	if len(again) != 2 || again[0].event != "caught-up" || again[1].event != "end" {
		t.Fatalf("resumed after the end: %+v", again)
	}
	// So does a history-only stream resumed there: the run is over.
	hist := readSSE(t, b.url+"/v1/runs/over/events?follow=false", last, nil)
	if len(hist) != 2 || hist[1].event != "end" {
		t.Fatalf("history-only, resumed after the end: %+v", hist)
	}
	// A history-only stream of a live run does not claim the run ended.
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"going","input":{"steps":50,"stepMs":100}}`, nil)
	jetruntest.WaitRow(t, b.store, "going", 10*time.Second, func(r *model.Row) bool { return r.Milestones > 0 })
	hist = readSSE(t, b.url+"/v1/runs/going/events?follow=false", "", nil)
	if hist[len(hist)-1].event != "history-end" {
		t.Fatalf("history of a live run ends with %q", hist[len(hist)-1].event)
	}
	do(t, "POST", b.url+"/v1/runs/going/cancel", "", nil)
}

// With tokens, every /v1 call needs one: none or a wrong one is 401, a read
// token cannot write (403), a write token can; health and the UI's pages
// stay open. The web UI keeps its token in a SameSite cookie that a
// cross-site POST cannot use.
func TestTokensGuardTheAPI(t *testing.T) {
	const readTok, writeTok = "read-token-0123456789", "write-token-0123456789"
	b := setupWith(t, map[string]httpapi.Role{readTok: httpapi.RoleRead, writeTok: httpapi.RoleWrite})
	call := func(method, path, body, token string, hdr map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if method != http.MethodGet {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	dispatch := `{"agentType":"demo","runId":"auth-1","input":{"steps":1,"stepMs":1}}`
	for _, c := range []struct {
		name, method, path, body, token string
		hdr                             map[string]string
		want                            int
	}{
		{"health is open", "GET", "/healthz", "", "", nil, 200},
		{"the UI page is open", "GET", "/", "", "", nil, 200},
		{"list without a token", "GET", "/v1/runs", "", "", nil, 401},
		{"list with a wrong token", "GET", "/v1/runs", "", "not-a-token-at-all", nil, 401},
		{"list with a read token", "GET", "/v1/runs", "", readTok, nil, 200},
		{"dispatch without a token", "POST", "/v1/runs", dispatch, "", nil, 401},
		{"dispatch with a read token", "POST", "/v1/runs", dispatch, readTok, nil, 403},
		{"clear with a read token", "DELETE", "/v1/runs?all=true", "", readTok, nil, 403},
		{"dispatch with a write token", "POST", "/v1/runs", dispatch, writeTok, nil, 201},
		{"read a run with a write token", "GET", "/v1/runs/auth-1", "", writeTok, nil, 200},
		{"a cookie session with a wrong token", "POST", "/v1/session", `{"token":"wrong"}`, "", nil, 401},
		{"a cookie session from another site", "POST", "/v1/session", `{"token":"` + writeTok + `"}`, "", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"a cookie write from another site", "POST", "/v1/runs/auth-1/cancel", "{}", "", map[string]string{"Cookie": httpapi.TokenCookie + "=" + writeTok, "Sec-Fetch-Site": "cross-site"}, 403},
		{"a cookie write from another origin", "POST", "/v1/runs/auth-1/cancel", "{}", "", map[string]string{"Cookie": httpapi.TokenCookie + "=" + writeTok, "Origin": "http://evil.example"}, 403},
		{"a cookie read", "GET", "/v1/runs", "", "", map[string]string{"Cookie": httpapi.TokenCookie + "=" + readTok}, 200},
		{"a cookie write from this page", "POST", "/v1/runs/auth-1/cancel", "{}", "", map[string]string{"Cookie": httpapi.TokenCookie + "=" + writeTok, "Sec-Fetch-Site": "same-origin"}, 200},
	} {
		if got := call(c.method, c.path, c.body, c.token, c.hdr); got != c.want {
			t.Errorf("%s: %s %s answered %d, want %d", c.name, c.method, c.path, got, c.want)
		}
	}

	// The page at / embeds the runs list only for a caller who may read it.
	body := func(cookie string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", b.url+"/", nil)
		if cookie != "" {
			req.Header.Set("Cookie", httpapi.TokenCookie+"="+cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return string(data)
	}
	if strings.Contains(body(""), "auth-1") {
		t.Error("the page at / shows runs to a caller without a token")
	}
	if !strings.Contains(body(readTok), "auth-1") {
		t.Error("the page at / does not show runs to a caller with a read token")
	}

	// The UI's session: a valid token comes back as an HttpOnly, SameSite
	// cookie naming its role.
	req, _ := http.NewRequest("POST", b.url+"/v1/session", strings.NewReader(`{"token":"`+readTok+`"}`))
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Role string }
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != 200 || got.Role != "read" || len(cookies) != 1 || !cookies[0].HttpOnly ||
		cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Value != readTok {
		t.Fatalf("session: %d role %q cookies %+v", resp.StatusCode, got.Role, cookies)
	}
}

// Without tokens the API must stay on loopback.
func TestNoTokensMeansLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true, "": true,
		"0.0.0.0:8080": false, ":8080": false, "10.1.2.3:8080": false, "[::]:8080": false,
	} {
		err := httpapi.CheckListenAddr(addr, false)
		if (err == nil) != ok {
			t.Errorf("%q without tokens: %v", addr, err)
		}
		if err != nil && !strings.Contains(err.Error(), "JETRUN_HTTP_TOKENS") {
			t.Errorf("%q: the error does not say what to set: %v", addr, err)
		}
		if err := httpapi.CheckListenAddr(addr, true); err != nil {
			t.Errorf("%q with tokens: %v", addr, err)
		}
	}
}

// The page at / carries the first page of the runs list its query selects,
// so a first visit shows the runs on first paint; a run's text cannot break
// out of the embedding. Run pages carry none.
func TestPageEmbedsTheRunsList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	page := func(path string) (string, *runview.Page) {
		t.Helper()
		resp, err := http.Get(b.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %s %s", path, resp.Status, resp.Header.Get("Content-Type"))
		}
		html := string(body)
		const open, end = `<script id="runs-snapshot" type="application/json">`, `</script>`
		_, rest, ok := strings.Cut(html, open)
		if !ok {
			return html, nil
		}
		data, _, ok := strings.Cut(rest, end)
		if !ok {
			t.Fatalf("GET %s: unterminated snapshot", path)
		}
		var p runview.Page
		if err := json.Unmarshal([]byte(data), &p); err != nil {
			t.Fatalf("GET %s: snapshot %q: %v", path, data, err)
		}
		return html, &p
	}

	if _, p := page("/"); p == nil || p.Total != 0 || len(p.Runs) != 0 {
		t.Fatalf("an empty system's page embeds %+v", p)
	}
	for i := range 3 {
		do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(`{"agentType":"demo","runId":"p%d","input":{"steps":1,"stepMs":0}}`, i), nil)
	}
	const nasty = `</script><script>alert(1)</script>`
	if _, err := b.store.Create(context.Background(), &model.Row{ID: "nasty", AgentType: "demo", Status: events.StatusError,
		Error: nasty, CreatedAt: time.Now(), Unindexed: true}); err != nil {
		t.Fatal(err)
	}
	html, p := page("/")
	if p == nil || p.Total != 4 || len(p.Runs) != 4 {
		t.Fatalf("page embeds %+v, want the 4 runs", p)
	}
	if strings.Contains(html, nasty) || strings.Count(html, "<script") != 2 {
		t.Fatalf("a run's error text leaked into the page's markup:\n%s", html)
	}
	for _, r := range p.Runs {
		if r.ID == "nasty" && r.Error != nasty {
			t.Fatalf("nasty's error came out as %q", r.Error)
		}
	}
	// The page's filters select what it embeds, as GET /v1/runs does.
	if _, p := page("/?status=error&limit=1"); p == nil || p.Total != 1 || p.Runs[0].ID != "nasty" {
		t.Fatalf("filtered page embeds %+v", p)
	}
	if _, p := page("/?agentType=demo&limit=2"); p == nil || p.Total != 4 || len(p.Runs) != 2 || p.Next == "" {
		t.Fatalf("a page of 2 embeds %+v", p)
	}
	// A bad filter embeds nothing: the page fetches the list and shows the error.
	if _, p := page("/?parent=a.b"); p != nil {
		t.Fatalf("a bad filter embeds %+v", p)
	}
	if _, p := page("/runs/p1"); p != nil {
		t.Fatalf("a run page embeds %+v", p)
	}
}

// ?parentToolCallId= lists the runs one tool call of a parent dispatched,
// like getRunsForToolCall, alone or with the other filters.
func TestListFiltersByParentToolCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, call := range []string{"call-a", "call-a", "call-b", ""} {
		body := fmt.Sprintf(`{"agentType":"demo","runId":"tc%d","parent":"boss","parentToolCallId":%q,"depth":1,"input":{"steps":1,"stepMs":0}}`, i, call)
		wantStatus(t, do(t, "POST", b.url+"/v1/runs", body, nil), 201)
	}
	var page struct {
		Runs  []model.Row
		Total int
	}
	ids := func() []string {
		var out []string
		for _, r := range page.Runs {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?parentToolCallId=call-a", "", &page), 200)
	if got := ids(); page.Total != 2 || !slices.Equal(got, []string{"tc0", "tc1"}) {
		t.Fatalf("call-a: %d %v", page.Total, got)
	}
	page.Runs = nil
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?parent=boss&parentToolCallId=call-b", "", &page), 200)
	if got := ids(); page.Total != 1 || !slices.Equal(got, []string{"tc2"}) {
		t.Fatalf("boss, call-b: %d %v", page.Total, got)
	}
	page.Runs = nil
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?parentToolCallId=nobody", "", &page), 200)
	if page.Total != 0 || len(page.Runs) != 0 {
		t.Fatalf("an unknown tool call: %+v", page)
	}
	var body struct{ Code string }
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?parentToolCallId="+strings.Repeat("x", events.MaxParentToolCallIDLength+1), "", &body), 400)
}

// A detached budget of 0 turns it off: the row stores -1 (events.BudgetNever);
// a budget left out stays 0, the reconciler's default.
func TestDispatchWithABudgetOfZeroTurnsItOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var row model.Row
	wantStatus(t, do(t, "POST", b.url+"/v1/runs",
		`{"agentType":"demo","runId":"nb","input":{"steps":1,"stepMs":0},"detached":{"maxBudgetMs":60000,"noProgressBudgetMs":0}}`, &row), 201)
	stored, _, err := b.store.Get(context.Background(), "nb")
	if err != nil {
		t.Fatal(err)
	}
	if d := stored.Detached; d == nil || d.NoProgressBudgetMs != events.BudgetNever || d.MaxBudgetMs != 60000 {
		t.Fatalf("detached = %+v", stored.Detached)
	}
}

// POST /v1/runs with W3C traceparent/tracestate headers: the run's row
// carries them (and from there its events, finish and handler context).
func TestDispatchCarriesTraceContextHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req, err := http.NewRequest("POST", b.url+"/v1/runs", strings.NewReader(`{"agentType":"demo","runId":"ht1","input":{"steps":1,"stepMs":0}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", tp)
	req.Header.Set("tracestate", "congo=t61rcWkgMzE")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantStatus(t, resp, 201)
	row := jetruntest.WaitRow(t, b.store, "ht1", 10*time.Second, jetruntest.Final)
	if row.TraceParent != tp || row.TraceState != "congo=t61rcWkgMzE" {
		t.Fatalf("row trace = %q %q", row.TraceParent, row.TraceState)
	}
	// A malformed traceparent is dropped, not an error.
	req, _ = http.NewRequest("POST", b.url+"/v1/runs", strings.NewReader(`{"agentType":"demo","runId":"ht2","input":{"steps":1,"stepMs":0}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "not-a-trace")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantStatus(t, resp, 201)
	if row := jetruntest.WaitRow(t, b.store, "ht2", 10*time.Second, jetruntest.Final); row.TraceParent != "" {
		t.Fatalf("malformed traceparent kept: %q", row.TraceParent)
	}
}

// GET /v1/runs?q= lists the runs whose id contains q, ignoring case (the
// web UI's search box); a q longer than any run id is refused.
func TestListSearchesByRunID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"Invoice-2024-a", "invoice-2024-b", "report-7"} {
		body := fmt.Sprintf(`{"agentType":"demo","runId":%q,"input":{"steps":1,"stepMs":0}}`, id)
		wantStatus(t, do(t, "POST", b.url+"/v1/runs", body, nil), 201)
	}
	var page struct {
		Runs  []model.Row
		Total int
	}
	ids := func() []string {
		var out []string
		for _, r := range page.Runs {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?q=INVOICE-2024", "", &page), 200)
	if got := ids(); page.Total != 2 || !slices.Equal(got, []string{"Invoice-2024-a", "invoice-2024-b"}) {
		t.Fatalf("q=INVOICE-2024: %d %v", page.Total, got)
	}
	page.Runs = nil
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?q=t-7&agentType=demo", "", &page), 200)
	if got := ids(); page.Total != 1 || !slices.Equal(got, []string{"report-7"}) {
		t.Fatalf("q=t-7: %d %v", page.Total, got)
	}
	page.Runs = nil
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?q=nothing-like-it", "", &page), 200)
	if page.Total != 0 || len(page.Runs) != 0 {
		t.Fatalf("q matching nothing: %+v", page)
	}
	var body struct{ Code string }
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?q="+strings.Repeat("x", events.MaxIDLength+1), "", &body), 400)
}

// TestRunBodyIsTheReadType: a run's body (GET /v1/runs/<id>, and the
// list's summaries) is jetruntype.Run and its live/final flags: no field
// of the engine's bookkeeping, though the stored row carries it (a held
// run's worker epoch).
func TestRunBodyIsTheReadType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	allowed := map[string]bool{"live": true, "final": true, "notified": true, "removed": true}
	rt := reflect.TypeFor[jetruntype.Run]()
	for i := range rt.NumField() {
		allowed[strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	do(t, "POST", b.url+"/v1/runs", `{"agentType":"demo","runId":"held","input":{"steps":100,"stepMs":100}}`, nil)
	stored := jetruntest.WaitRow(t, b.store, "held", 10*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusRunning && r.FirstEventSeq != 0
	})
	if stored.WorkerEpoch == "" || stored.DispatchSeq == 0 {
		t.Fatalf("stored row %+v: want a worker epoch and a dispatch sequence to leave out", stored)
	}
	var body map[string]any
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/held", "", &body), 200)
	var list struct {
		Runs []map[string]any `json:"runs"`
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs?status=running", "", &list), 200)
	if len(list.Runs) != 1 {
		t.Fatalf("running = %+v", list)
	}
	for what, m := range map[string]map[string]any{"row": body, "summary": list.Runs[0]} {
		if m["worker"] != stored.Worker || m["attempt"] != float64(stored.Attempt) {
			t.Fatalf("%s %v: want worker %s, attempt %d", what, m, stored.Worker, stored.Attempt)
		}
		for _, k := range []string{"workerEpoch", "dispatchSeq"} {
			if _, ok := m[k]; ok {
				t.Errorf("%s carries %q, the engine's bookkeeping", what, k)
			}
		}
		for k := range m {
			if !allowed[k] {
				t.Errorf("%s carries %q, a stored field that is not jetruntype.Run's", what, k)
			}
		}
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/held/cancel", `{"reason":"enough"}`, nil), 200)
	jetruntest.WaitRow(t, b.store, "held", 10*time.Second, jetruntest.Final)
}
