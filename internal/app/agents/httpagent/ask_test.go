package httpagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/internal/app/agents/httpagent"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// An http child's wait line with an ask is an ask like a Go handler's:
// its kind, title and payload are stored, and its answer comes back to
// the child as the signal.
func TestChildWaitLineAsks(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		if req.Signal == nil {
			lines(w, `{"wait":"approve","ask":{"kind":"approve","title":"publish?","payload":{"post":"tides"}}}`)
			return
		}
		lines(w, fmt.Sprintf(`{"result":{"output":%s}}`, req.Signal.Payload))
	}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	w, err := agents.StartPool(context.Background(), rt, worker.Config{}, nil,
		agents.Configured{HTTP: map[string]httpagent.Config{"ext": {URL: srv.URL + "/run"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store, st := engine.From(rt).Store(), engine.From(rt).Asks()
	dispatch(t, client, "ha")
	jetruntest.WaitRow(t, store, "ha", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" })
	a := jetruntest.WaitAsk(t, st, asks.SignalID("ha", "approve", 0), 30*time.Second, func(*events.Ask) bool { return true })
	if a.Kind != events.AskApprove || a.Title != "publish?" || string(a.Payload) != `{"post":"tides"}` || a.AgentType != "ext" {
		t.Fatalf("the child's ask: %+v", a)
	}
	a, err = st.Answer(context.Background(), a.ID, a.Digest, json.RawMessage(`{"approved":true}`), "erin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Deliver(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "ha", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || string(row.Output) != `{"approved":true}` {
		t.Fatalf("row: %s %s (%s)", row.Status, row.Output, row.Error)
	}
}
