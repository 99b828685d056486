package httpagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/internal/app/agents/httpagent"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A reserve line pauses the response, as a call line does; the next
// request carries the answer in "reserved": ok, then (past the budget)
// refused with reason budget-exceeded.
func TestChildReservesAndGetsTheAnswer(t *testing.T) {
	t.Parallel()
	c := &child{serve: func(w http.ResponseWriter, r *http.Request, req eventline.Request) {
		switch {
		case req.Reserved == nil:
			lines(w, `{"reserve":{"inputTokens":700}}`)
		case req.Reserved.OK:
			lines(w, `{"usage":{"inputTokens":700}}`, `{"reserve":{"inputTokens":400}}`)
		default:
			out, _ := json.Marshal(req.Reserved)
			lines(w, fmt.Sprintf(`{"result":{"summary":"refused","output":%s}}`, out))
		}
	}}
	client, store, _ := setup(t, c, httpagent.Config{}, worker.Config{})
	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "ext", RunID: "hr", Input: 1,
		Budget: &events.TreeBudget{Tokens: 1000}}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "hr", 30*time.Second, jetruntest.Final)
	var got eventline.Reserved
	if row.Status != events.StatusCompleted || json.Unmarshal(row.Output, &got) != nil ||
		got.OK || got.Reason != events.ReasonBudgetExceeded || got.Error == "" {
		t.Fatalf("row: %s %s (%s)", row.Status, row.Output, row.Error)
	}
	if reqs := c.received(); len(reqs) != 3 || reqs[1].Reserved == nil || !reqs[1].Reserved.OK {
		t.Fatalf("requests %+v", reqs)
	}
	if row.TreeUsage.Tokens() != 700 || len(row.Holds) != 0 {
		t.Fatalf("tree usage %+v, holds %+v; want 700, none held", row.TreeUsage, row.Holds)
	}
}
