package httpagent_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/internal/app/agents/httpagent"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A re-run of an http child from its step "three" posts the steps before
// it in its request's "steps", as the run it re-runs stored them: the
// child skips the steps it is given, does step three only, and only that
// step's usage is counted.
func TestRerunRequestCarriesTheGivenSteps(t *testing.T) {
	t.Parallel()
	c := &child{}
	c.serve = func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		var out []string
		for _, name := range []string{"one", "two", "three"} {
			if _, given := req.Steps[name]; given {
				continue
			}
			out = append(out, `{"usage":{"outputTokens":5,"model":"m1"}}`, fmt.Sprintf(`{"step":{"name":%q,"output":"%s done"}}`, name, name))
		}
		lines(w, append(out, `{"result":{"summary":"done"}}`)...)
	}
	client, store, evs := setup(t, c, httpagent.Config{}, worker.Config{})
	dispatch(t, client, "g1")
	row := jetruntest.WaitRow(t, store, "g1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("original: %s %s", row.Status, row.Error)
	}
	if _, err := client.Rerun(context.Background(), "g1", parent.RerunRequest{FromStep: "three", RunID: "g1-again"}); err != nil {
		t.Fatal(err)
	}
	again := jetruntest.WaitRow(t, store, "g1-again", 30*time.Second, jetruntest.Final)
	if again.Status != events.StatusCompleted {
		t.Fatalf("re-run: %s %s", again.Status, again.Error)
	}
	reqs := c.received()
	if last := reqs[len(reqs)-1]; len(last.Steps) != 2 || string(last.Steps["one"]) != `"one done"` || string(last.Steps["two"]) != `"two done"` {
		t.Errorf("re-run's request carried steps %v, want one and two", last.Steps)
	}
	var stored []string
	for _, ev := range evs("g1-again") {
		if st := ev.Step; st != nil {
			stored = append(stored, st.Name+"@"+st.GivenFrom)
		}
	}
	if !slices.Equal(stored, []string{"one@g1", "two@g1", "three@"}) {
		t.Errorf("re-run's stored steps %v", stored)
	}
	if row.Usage == nil || row.Usage.OutputTokens != 15 || again.Usage == nil || again.Usage.OutputTokens != 5 {
		t.Errorf("usage: original %+v, re-run %+v; want 15 and 5 output tokens", row.Usage, again.Usage)
	}
}
