package httpagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/internal/app/agents/httpagent"
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

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// child is a test HTTP child: it records every request it receives and
// answers through serve.
type child struct {
	mu       sync.Mutex
	requests []eventline.Request
	headers  []http.Header
	serve    func(w http.ResponseWriter, r *http.Request, req eventline.Request)
}

func (c *child) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req eventline.Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.requests = append(c.requests, req)
	c.headers = append(c.headers, r.Header.Clone())
	c.mu.Unlock()
	w.Header().Set("Content-Type", httpagent.ContentType)
	c.serve(w, r, req)
}

func (c *child) received() []eventline.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]eventline.Request(nil), c.requests...)
}

// lines writes event lines, flushing each.
func lines(w http.ResponseWriter, ls ...string) {
	for _, l := range ls {
		fmt.Fprintln(w, l)
		w.(http.Flusher).Flush()
	}
}

// setup serves agent type "ext" from c through a worker on a real server.
func setup(t *testing.T, c *child, cfg httpagent.Config, wcfg worker.Config) (*parent.Client, *runstore.Store, func(id string) []jetruntest.Event) {
	t.Helper()
	client, store, evs, _ := setupWorker(t, c, cfg, wcfg)
	return client, store, evs
}

func setupWorker(t *testing.T, c *child, cfg httpagent.Config, wcfg worker.Config) (*parent.Client, *runstore.Store, func(id string) []jetruntest.Event, *worker.Worker) {
	t.Helper()
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	cfg.URL = srv.URL + "/run"
	w, err := agents.StartPool(context.Background(), rt, wcfg, nil, agents.Configured{HTTP: map[string]httpagent.Config{"ext": cfg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return client, engine.From(rt).Store(), func(id string) []jetruntest.Event { return jetruntest.ReadEvents(t, js, id) }, w
}

func dispatch(t *testing.T, client *parent.Client, id string) {
	t.Helper()
	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "ext", RunID: id, Input: map[string]any{"topic": "tides"}}); err != nil {
		t.Fatal(err)
	}
}

// A child streams chunks, progress and a milestone, waits for a signal, and
// returns a result once the signal's payload reaches it in a second request.
func TestChildStreamsWaitsForASignalAndCompletes(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		if req.Signal == nil {
			lines(w, `{"chunk":"reading "}`, `{"chunk":{"tokens":2}}`,
				`{"progress":{"fraction":0.5,"phase":"reading","message":"half"}}`,
				`{"milestone":{"name":"read","data":{"pages":3}}}`, `{"wait":"approve"}`)
			return
		}
		var p struct{ OK bool }
		_ = json.Unmarshal(req.Signal.Payload, &p)
		lines(w, `{"chunk":"approved"}`, fmt.Sprintf(`{"result":{"summary":"done: %v","output":{"milestones":%d}}}`, p.OK, len(req.Milestones)))
	}}
	client, store, evs := setup(t, c, httpagent.Config{Token: "s3cret"}, worker.Config{})
	dispatch(t, client, "h1")
	jetruntest.WaitRow(t, store, "h1", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" })
	if _, err := client.Signal(context.Background(), "h1", "approve", map[string]bool{"ok": true}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "h1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Summary != "done: true" || string(row.Output) != `{"milestones":1}` {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
	got := evs("h1")
	var chunks []string
	for _, c := range jetruntest.Chunks(got) {
		chunks = append(chunks, string(c.Data))
	}
	if strings.Join(chunks, " ") != `"reading " {"tokens":2} "approved"` {
		t.Fatalf("chunks %v", chunks)
	}
	ms := jetruntest.Milestones(got)
	if len(ms) != 1 || ms[0].Name != "read" || string(ms[0].Data) != `{"pages":3}` {
		t.Fatalf("milestones %+v", ms)
	}
	if row.Progress == nil || row.Progress.Phase != "reading" {
		t.Fatalf("progress %+v", row.Progress)
	}
	reqs := c.received()
	if len(reqs) != 2 || reqs[0].RunID != "h1" || reqs[0].Attempt != 1 || string(reqs[0].Input) != `{"topic":"tides"}` ||
		reqs[1].Signal == nil || reqs[1].Signal.Name != "approve" || len(reqs[1].Milestones) != 1 {
		t.Fatalf("requests %+v", reqs)
	}
	if h := c.headers[0].Get("Authorization"); h != "Bearer s3cret" {
		t.Fatalf("Authorization %q", h)
	}
}

func TestBrokenLineEndsTheRunWithItsLineNumber(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		lines(w, `{"chunk":"ok"}`, ``, `{"progress":{"fraction":7}}`)
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{})
	dispatch(t, client, "bad")
	row := jetruntest.WaitRow(t, store, "bad", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || !strings.Contains(row.Error, "line 3") || !strings.Contains(row.Error, "fraction") {
		t.Fatalf("row: %s %q", row.Status, row.Error)
	}
	if n := len(c.received()); n != 1 {
		t.Fatalf("%d requests; a format error is not retried", n)
	}
}

func TestErrorLineEndsTheRunWithTheChildsText(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		lines(w, `{"error":"no such topic","retryable":false}`)
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{})
	dispatch(t, client, "e1")
	row := jetruntest.WaitRow(t, store, "e1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || row.Error != "no such topic" || row.Reason != events.ReasonHandlerError {
		t.Fatalf("row: %s %s %q", row.Status, row.Reason, row.Error)
	}
}

func TestClientErrorStatusEndsTheRun(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		http.Error(w, "unknown field topic", http.StatusUnprocessableEntity)
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{})
	dispatch(t, client, "s4")
	row := jetruntest.WaitRow(t, store, "s4", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || !strings.Contains(row.Error, "422") || !strings.Contains(row.Error, "unknown field topic") {
		t.Fatalf("row: %s %q", row.Status, row.Error)
	}
}

// A dropped connection, a 503 and a retryable error line each end the
// attempt; the next attempt gets the milestones reached so far.
func TestDroppedConnectionAndRetryableErrorsRetryWithMilestones(t *testing.T) {
	t.Parallel()
	c := &child{}
	c.serve = func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		switch req.Attempt {
		case 1:
			lines(w, `{"milestone":{"name":"fetched"}}`)
			fmt.Fprint(w, `{"chunk":"partial`) // then the connection drops mid-line
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		case 2:
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		case 3:
			lines(w, `{"error":"rate limited","retryable":true}`)
		default:
			lines(w, fmt.Sprintf(`{"result":{"summary":"resumed after %s"}}`, req.Milestones[len(req.Milestones)-1].Name))
		}
	}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{MaxAttempts: 4})
	dispatch(t, client, "d1")
	row := jetruntest.WaitRow(t, store, "d1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 4 || row.Summary != "resumed after fetched" {
		t.Fatalf("row: %s attempt %d %q (%s)", row.Status, row.Attempt, row.Summary, row.Error)
	}
}

// A service that answers 429 (or 503) with Retry-After gets its next request
// no sooner than it asked: the worker's own first delay is about a second.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	const asked = 3 * time.Second
	var (
		mu sync.Mutex
		at []time.Time
	)
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if req.Attempt == 1 {
			w.Header().Set("Retry-After", strconv.Itoa(int(asked/time.Second)))
			http.Error(w, "rate limited", http.StatusTooManyRequests)
			return
		}
		lines(w, `{"result":{"summary":"done"}}`)
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{MaxAttempts: 2})
	dispatch(t, client, "ra")
	row := jetruntest.WaitRow(t, store, "ra", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("row: %s attempt %d %q", row.Status, row.Attempt, row.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("the service got %d requests, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < asked {
		t.Fatalf("the second request came %s after the 429, before the %s its Retry-After asked for", gap, asked)
	}
}

// An error line with "retryAfterMs" is tried again no sooner than it asks
// (the worker's own first delay is about a second).
func TestErrorLineRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	const asked = 3 * time.Second
	var (
		mu sync.Mutex
		at []time.Time
	)
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if req.Attempt == 1 {
			lines(w, fmt.Sprintf(`{"error":"quota used up","retryable":true,"retryAfterMs":%d}`, asked.Milliseconds()))
			return
		}
		lines(w, `{"result":{"summary":"done"}}`)
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{MaxAttempts: 2})
	dispatch(t, client, "rl")
	row := jetruntest.WaitRow(t, store, "rl", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("row: %s attempt %d %q", row.Status, row.Attempt, row.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("the child got %d requests, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < asked {
		t.Fatalf("the second request came %s after the error line, before the %s its retryAfterMs asked for", gap, asked)
	}
}

func TestRetriesEndWithTheLastError(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		lines(w, `{"chunk":"no result follows"}`)
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{MaxAttempts: 2})
	dispatch(t, client, "nr")
	row := jetruntest.WaitRow(t, store, "nr", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || row.Attempt != 2 || !strings.Contains(row.Error, "without a result or error line") {
		t.Fatalf("row: %s attempt %d %q", row.Status, row.Attempt, row.Error)
	}
}

func TestSilentResponseTimesOut(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		lines(w, `{"chunk":"then nothing"}`)
		<-r.Context().Done()
	}}
	client, store, _ := setup(t, c, httpagent.Config{Timeout: 200 * time.Millisecond}, worker.Config{MaxAttempts: 1})
	dispatch(t, client, "quiet")
	row := jetruntest.WaitRow(t, store, "quiet", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || !strings.Contains(row.Error, "no response line for 200ms after line 1") {
		t.Fatalf("row: %s %q", row.Status, row.Error)
	}
}

// A cancel aborts the request: the child sees its request context end.
func TestCancelAbortsTheRequest(t *testing.T) {
	t.Parallel()
	aborted := make(chan struct{})
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		lines(w, `{"chunk":"working"}`)
		<-r.Context().Done()
		close(aborted)
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{})
	dispatch(t, client, "c1")
	jetruntest.WaitRow(t, store, "c1", 30*time.Second, func(r *model.Row) bool { return r.Chunks > 0 })
	if _, err := client.Cancel(context.Background(), "c1", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "c1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusAborted {
		t.Fatalf("row: %s %q", row.Status, row.Error)
	}
	select {
	case <-aborted:
	case <-time.After(30 * time.Second):
		t.Fatal("the child's request was not aborted")
	}
}

// A shutdown whose timeout runs out aborts the request and hands the run
// back for another worker.
func TestShutdownAbortsTheRequestAndHandsTheRunBack(t *testing.T) {
	t.Parallel()
	aborted := make(chan struct{})
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		lines(w, `{"chunk":"working"}`)
		<-r.Context().Done()
		close(aborted)
	}}
	client, store, _, w := setupWorker(t, c, httpagent.Config{}, worker.Config{})
	dispatch(t, client, "sd")
	jetruntest.WaitRow(t, store, "sd", 30*time.Second, func(r *model.Row) bool { return r.Chunks > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = w.Shutdown(ctx)
	select {
	case <-aborted:
	case <-time.After(30 * time.Second):
		t.Fatal("the child's request was not aborted")
	}
	row := jetruntest.WaitRow(t, store, "sd", 30*time.Second, func(r *model.Row) bool { return r.Handoffs == 1 })
	if row.Status.Final() || row.Worker != "" {
		t.Fatalf("row: %s worker %q: not handed back", row.Status, row.Worker)
	}
}

// A call line pauses the response; the worker makes the call (durable,
// answered by the run's caller) and POSTs again with the reply. A failed
// call comes back as a reply with an error.
func TestChildCallsItsCallerAndGetsTheReply(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		switch {
		case req.Reply == nil:
			lines(w, `{"chunk":"asking"}`, `{"call":{"name":"ask","input":{"q":"colour?"}}}`)
		case req.Reply.Error == "":
			lines(w, `{"call":{"name":"ask","input":{"q":"size?"}}}`)
		default:
			out, _ := json.Marshal([]any{req.Reply})
			lines(w, fmt.Sprintf(`{"result":{"summary":"asked","output":%s}}`, out))
		}
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{})
	srv, err := client.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleFunc("ask", func(_ context.Context, call *parent.Call) (any, error) {
		var in struct{ Q string }
		_ = json.Unmarshal(call.Input, &in)
		if in.Q == "size?" {
			return nil, fmt.Errorf("no sizes")
		}
		return "blue", nil
	})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	dispatch(t, client, "hc")
	row := jetruntest.WaitRow(t, store, "hc", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || string(row.Output) != `[{"name":"ask","error":"no sizes"}]` {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
	reqs := c.received()
	if len(reqs) != 3 || reqs[1].Reply == nil || string(reqs[1].Reply.Output) != `"blue"` || reqs[1].Signal != nil {
		t.Fatalf("requests %+v", reqs)
	}
}

// A step line is stored before the child's next line is acted on; the
// next attempt's request carries it in "steps", and a name stored already
// keeps its first output.
func TestStepsReachTheNextAttempt(t *testing.T) {
	t.Parallel()
	c := &child{}
	c.serve = func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		if req.Attempt == 1 {
			lines(w, `{"step":{"name":"plan-1","output":{"queries":["tides"]}}}`, `{"chunk":"after the step"}`,
				`{"error":"model overloaded","retryable":true}`)
			return
		}
		lines(w, `{"step":{"name":"plan-1","output":"a second plan"}}`,
			fmt.Sprintf(`{"result":{"summary":"attempt %d", "output":%s}}`, req.Attempt, req.Steps["plan-1"]))
	}
	client, store, evs := setup(t, c, httpagent.Config{}, worker.Config{MaxAttempts: 2})
	dispatch(t, client, "s1")
	row := jetruntest.WaitRow(t, store, "s1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Summary != "attempt 2" || string(row.Output) != `{"queries":["tides"]}` {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
	reqs := c.received()
	if len(reqs[0].Steps) != 0 || reqs[0].Steps == nil {
		t.Errorf("first request steps = %v, want an empty object", reqs[0].Steps)
	}
	var stepSeq, chunkSeq uint64
	var steps []string
	for _, ev := range evs("s1") {
		switch {
		case ev.Step != nil:
			stepSeq = ev.Seq
			steps = append(steps, ev.Step.Name+"="+string(ev.Step.Output))
		case ev.Chunk != nil:
			chunkSeq = ev.Seq
		}
	}
	if fmt.Sprint(steps) != `[plan-1={"queries":["tides"]}]` || stepSeq == 0 || chunkSeq < stepSeq {
		t.Errorf("steps %v at %d, chunk at %d; want one step stored before the chunk", steps, stepSeq, chunkSeq)
	}
}

// Usage lines right before a step line are the step's: stored with it and
// counted on the run once; a usage line before the result is the run's.
func TestUsageLinesBeforeAStepLineAreStoredWithIt(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		lines(w, `{"usage":{"inputTokens":30,"model":"m1"}}`, `{"usage":{"inputTokens":10,"model":"m1"}}`,
			`{"step":{"name":"plan-1","output":1,"usage":{"outputTokens":2,"model":"m1"}}}`,
			`{"usage":{"inputTokens":5,"model":"m1"}}`, `{"result":{"summary":"done"}}`)
	}}
	client, store, evs := setup(t, c, httpagent.Config{}, worker.Config{})
	dispatch(t, client, "us1")
	row := jetruntest.WaitRow(t, store, "us1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("row: %s (%s)", row.Status, row.Error)
	}
	step := events.UsageTotals{InputTokens: 40, OutputTokens: 2}
	var stored []events.UsageTotals
	for _, ev := range evs("us1") {
		if st := ev.Step; st != nil && st.Usage != nil {
			stored = append(stored, st.Usage.UsageTotals)
		}
	}
	if len(stored) != 1 || stored[0] != step {
		t.Errorf("stored step usage %+v; want [%+v]", stored, step)
	}
	if want := (events.UsageTotals{InputTokens: 45, OutputTokens: 2}); row.Usage == nil || row.Usage.UsageTotals != want {
		t.Errorf("run usage %+v; want %+v", row.Usage, want)
	}
}
