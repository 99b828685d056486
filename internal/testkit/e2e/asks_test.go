package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// Kill -9 between an answer and the run resuming: the run resumes once,
// with that answer. First the parent-worker dies after the answer's
// compare-and-set and before its delivery (the answer is stored, the
// signal is not): the next parent-worker's asks keeper delivers it at
// start. Then the child-worker dies while its run waits, and the answer
// comes meanwhile: the run's next attempt waits again on the same ask (no
// second one) and gets the answer once.
func TestAskAnswerSurvivesKill9(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st, err := asks.Open(context.Background(), e.js, wire.Namespace(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pwEnv := map[string]string{"JETRUN_NATS_URL": e.url, "JETRUN_HTTP_ADDR": addr, "JETRUN_LOG_LEVEL": "debug"}
	pw := start(t, "parent-worker", pwEnv)
	pw.waitLog("parent-worker ready", 60*time.Second)
	cw := e.childWorker(t, "w1", nil)
	api := &apiClient{t: t, base: "http://" + addr, http: &http.Client{Timeout: 30 * time.Second}}
	approve := json.RawMessage(`{"approved":true}`)

	// 1. The answerer dies between the answer and its delivery.
	api.dispatch("ask-a", nil, map[string]int{"steps": 2, "stepMs": 50, "approveAt": 2})
	a := openAsk(t, api, "ask-a")
	if a.Kind != events.AskApprove || a.ID != asks.SignalID("ask-a", "approve", 0) {
		t.Fatalf("the demo's approval ask: %+v", a)
	}
	pw.kill()
	if _, err := st.Answer(context.Background(), a.ID, a.Digest, approve, "alice"); err != nil {
		t.Fatal(err) // what the answerer stored before it died
	}
	if n := signalsStored(t, e.js, "ask-a"); n != 0 {
		t.Fatalf("%d signals stored before any delivery", n)
	}
	pw = start(t, "parent-worker", pwEnv)
	pw.waitLog("parent-worker ready", 60*time.Second)
	resumedOnce(t, e, st, "ask-a", a.ID, "alice")

	// 2. The child-worker dies while the run waits; the answer comes
	// before another worker takes the run over.
	api.dispatch("ask-b", nil, map[string]int{"steps": 2, "stepMs": 50, "approveAt": 2})
	b := openAsk(t, api, "ask-b")
	cw.kill()
	var answered events.Ask
	api.call("POST", "/v1/asks/"+b.ID+":answer", map[string]any{"digest": b.Digest, "value": approve, "by": "bob"}, &answered)
	if answered.Answer == nil || answered.Answer.DeliveredAt == nil {
		t.Fatalf("answer to ask-b: %+v; want it delivered", answered)
	}
	e.childWorker(t, "w2", nil)
	row := resumedOnce(t, e, st, "ask-b", b.ID, "bob")
	if row.Attempt < 2 {
		t.Fatalf("ask-b ended at attempt %d; want it taken over", row.Attempt)
	}
	var all struct {
		Asks []events.Ask `json:"asks"`
	}
	api.call("GET", "/v1/asks?status=all&runId=ask-b", nil, &all)
	if len(all.Asks) != 1 {
		t.Fatalf("asks of ask-b after the takeover: %+v; want the one", all.Asks)
	}
}

// openAsk waits until GET /v1/asks lists run id's open ask and returns it.
func openAsk(t *testing.T, api *apiClient, id string) events.Ask {
	t.Helper()
	var got []events.Ask
	natstest.Eventually(t, 60*time.Second, func() bool {
		var l struct {
			Asks []events.Ask `json:"asks"`
		}
		api.call("GET", "/v1/asks?status=open&runId="+id, nil, &l)
		got = l.Asks
		return len(got) == 1
	}, "run %s's ask is not listed open", id)
	return got[0]
}

// signalsStored counts the approve signals stored for run id.
func signalsStored(t *testing.T, js jetstream.JetStream, id string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), "JETRUN_SIGNALS")
	if err != nil {
		t.Fatal(err)
	}
	subject := "jetrun.signal." + id + ".approve"
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// resumedOnce waits for run id to complete and checks it resumed once,
// with the approval answered by by: one signal stored, one "approved"
// milestone carrying the answer, the ask answered by by and closed.
func resumedOnce(t *testing.T, e *env, st *asks.Store, id, askID, by string) *model.Row {
	t.Helper()
	row := jetruntest.WaitRow(t, e.store, id, 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("run %s: %s %s", id, row.Status, row.Error)
	}
	if n := signalsStored(t, e.js, id); n != 1 {
		t.Fatalf("run %s: %d signals stored; want 1", id, n)
	}
	approved := 0
	for _, m := range jetruntest.Milestones(jetruntest.ReadEvents(t, e.js, id)) {
		if m.Name == "approved" {
			approved++
			if string(m.Data) != `{"approved":true}` {
				t.Fatalf("run %s approved with %s", id, m.Data)
			}
		}
	}
	if approved != 1 {
		t.Fatalf("run %s: %d approved milestones; want 1", id, approved)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		a, _, err := st.Get(context.Background(), askID)
		return err == nil && a.Status == events.AskAnswered && a.Answer.By == by && a.ClosedAt != nil
	}, "ask %s not answered by %s and closed", askID, by)
	return row
}
