package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// formSchema is the schema of the asker's form.
const formSchema = `{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}`

// setupAsks serves the API with its asks index over a worker whose
// "asker" waits for signal "go" with a form ask and returns the answer;
// configure changes the API's config.
func setupAsks(t *testing.T, configure ...func(*httpapi.Config)) (*bundle, *jetruntest.Env) {
	t.Helper()
	env := jetruntest.NewEnv(t)
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("asker", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			v, err := run.Wait(ctx, "go", worker.Ask{Title: "how many?", Payload: map[string]any{"input": run.Input()},
				Schema: json.RawMessage(formSchema)})
			return worker.Result{Output: v}, err
		})
	})
	view, err := runview.Start(context.Background(), env.Runtime, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Stop)
	st := engine.From(env.Runtime).Asks()
	askView, err := asks.StartView(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(askView.Stop)
	cfg := httpapi.Config{Client: env.Client, View: view, Conn: env.Conn, Asks: st, AskView: askView}
	for _, c := range configure {
		c(&cfg)
	}
	srv := httptest.NewServer(httpapi.New(cfg))
	t.Cleanup(srv.Close)
	return &bundle{url: srv.URL, store: env.Store}, env
}

type askList struct {
	Asks  []events.Ask `json:"asks"`
	Total int          `json:"total"`
	Next  string       `json:"next"`
}

// listAsks polls GET /v1/asks?query until it lists n asks.
func listAsks(t *testing.T, b *bundle, query string, n int) askList {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var l askList
		wantStatus(t, do(t, "GET", b.url+"/v1/asks?"+query, "", &l), 200)
		if len(l.Asks) == n {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/asks?%s: %d asks; want %d", query, len(l.Asks), n)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// GET /v1/asks lists a waiting run's ask; POST /v1/asks/{id}:answer
// refuses an unknown ask (404), a stale digest (409 naming the current
// one), a value breaking the form's schema (422 naming the field), takes
// the first answer, and names who answered to the second (409); the run
// gets the answer.
func TestAsksListAndAnswer(t *testing.T) {
	t.Parallel()
	b, env := setupAsks(t)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"asker","runId":"r1","input":"x"}`, nil), 201)
	l := listAsks(t, b, "status=open", 1)
	a := l.Asks[0]
	if a.ID != "r1.s.go.0" || a.RunID != "r1" || a.Kind != events.AskForm || a.Title != "how many?" || l.Total != 1 ||
		compactJSON(a.Payload) != `{"input":"x"}` || !strings.HasPrefix(a.Digest, "sha256:") {
		t.Fatalf("listed %+v", l)
	}
	if l := listAsks(t, b, "status=open&agentType=other", 0); l.Total != 0 {
		t.Fatalf("filtered by another agent type: %+v", l)
	}
	var raw json.RawMessage
	do(t, "GET", b.url+"/v1/asks", "", &raw)
	enc, _ := json.Marshal(a)
	if want := `{"asks":[` + string(enc) + `],"total":1,"next":""}`; string(raw) != want {
		t.Fatalf("GET /v1/asks answered\n%s\nwant it compact:\n%s", raw, want)
	}

	var e map[string]any
	wantStatus(t, do(t, "POST", b.url+"/v1/asks/nope.s.go.0:answer", `{"digest":"sha256:x","value":{"n":1}}`, &e), 404)
	if e["code"] != "not_found" {
		t.Fatalf("unknown ask: %v", e)
	}
	e = nil
	wantStatus(t, do(t, "POST", b.url+"/v1/asks/r1.s.go.0:answer", `{"digest":"sha256:old","value":{"n":1}}`, &e), 409)
	if e["code"] != "stale_digest" || e["digest"] != a.Digest {
		t.Fatalf("stale digest: %v; want the current digest %s", e, a.Digest)
	}
	for _, bad := range []string{`{"n":"one"}`, `{}`} {
		e = nil
		wantStatus(t, do(t, "POST", b.url+"/v1/asks/r1.s.go.0:answer", `{"digest":"`+a.Digest+`","value":`+bad+`}`, &e), 422)
		if e["code"] != "invalid_answer" || e["field"] != "/n" {
			t.Fatalf("value %s: %v; want 422 naming /n", bad, e)
		}
	}
	var got events.Ask
	wantStatus(t, do(t, "POST", b.url+"/v1/asks/r1.s.go.0:answer", `{"digest":"`+a.Digest+`","value":{"n":7},"by":"alice"}`, &got), 200)
	if got.Status != events.AskAnswered || got.Answer == nil || got.Answer.By != "alice" || got.Answer.Digest != a.Digest {
		t.Fatalf("answered %+v", got)
	}
	e = nil
	wantStatus(t, do(t, "POST", b.url+"/v1/asks/r1.s.go.0:answer", `{"digest":"`+a.Digest+`","value":{"n":8},"by":"bob"}`, &e), 409)
	if e["code"] != "already_answered" || e["answeredBy"] != "alice" || e["answeredAt"] == nil {
		t.Fatalf("second answer: %v; want 409 naming alice and when", e)
	}
	row := jetruntest.WaitRow(t, env.Store, "r1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || compactJSON(row.Output) != `{"n":7}` {
		t.Fatalf("run %s output %s", row.Status, row.Output)
	}
	listAsks(t, b, "status=open", 0)
	if l := listAsks(t, b, "status=answered", 1); l.Asks[0].ClosedAt == nil {
		t.Fatalf("answered ask not closed once the run went on: %+v", l.Asks[0])
	}
}

// GET /v1/asks/live sends an ask as it opens, then as it is answered.
func TestAsksLive(t *testing.T) {
	t.Parallel()
	b, _ := setupAsks(t)
	hello, opened, answered := make(chan struct{}), make(chan events.Ask, 1), make(chan events.Ask, 1)
	go func() {
		readSSE(t, b.url+"/v1/asks/live", "", func(ev sseEvent) bool {
			if ev.event == "hello" {
				close(hello)
			}
			if ev.event != "ask" {
				return false
			}
			var a events.Ask
			_ = json.Unmarshal([]byte(ev.data), &a)
			switch a.Status {
			case events.AskOpen:
				opened <- a
			case events.AskAnswered:
				answered <- a
				return true
			}
			return false
		})
	}()
	<-hello // subscribed: dispatch now
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"asker","runId":"r2","input":1}`, nil), 201)
	a := <-opened
	if a.RunID != "r2" {
		t.Fatalf("live ask %+v", a)
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/asks/"+a.ID+":answer", `{"digest":"`+a.Digest+`","value":{"n":1}}`, nil), 200)
	if a := <-answered; a.ID != "r2.s.go.0" || compactJSON(a.Answer.Value) != `{"n":1}` {
		t.Fatalf("live answered ask %+v", a)
	}
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
