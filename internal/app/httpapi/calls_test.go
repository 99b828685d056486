package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// GET /v1/runs/{id}/calls lists a run's calls, pending or answered; POST
// /v1/runs/{id}/calls/{seq}/reply answers one (once), with an output or an
// error the run gets as a value.
func TestCallsListedAndAnsweredOverHTTP(t *testing.T) {
	t.Parallel()
	b := setupServing(t, nil, func(w *worker.Worker) {
		w.HandleFunc("asker", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			first, err := run.Call(ctx, "ask-user", map[string]string{"q": "color?"})
			if err != nil {
				return worker.Result{}, err
			}
			_, err = run.Call(ctx, "ask-user", map[string]string{"q": "size?"})
			var ce *worker.CallError
			if !errors.As(err, &ce) {
				return worker.Result{}, fmt.Errorf("want a call error, got %v", err)
			}
			return worker.Result{Summary: ce.Message, Output: first}, nil
		})
	})

	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"asker","runId":"h1","input":{}}`, nil), 201)
	type listed struct {
		Calls []struct {
			Seq   int64           `json:"seq"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
			State string          `json:"state"`
		} `json:"calls"`
	}
	waitCalls := func(n int, state string) listed {
		var l listed
		natstest.Eventually(t, 30*time.Second, func() bool {
			l = listed{}
			do(t, "GET", b.url+"/v1/runs/h1/calls", "", &l)
			return len(l.Calls) == n && l.Calls[n-1].State == state
		}, "run h1 never had %d calls, the last %s: %+v", n, state, l)
		return l
	}
	l := waitCalls(1, "pending")
	var in map[string]string
	if err := json.Unmarshal(l.Calls[0].Input, &in); err != nil || l.Calls[0].Seq != 1 || l.Calls[0].Name != "ask-user" || in["q"] != "color?" {
		t.Fatalf("calls %+v", l)
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/h1/calls/1/reply", `{"output":"blue"}`, nil), 202)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/h1/calls/1/reply", `{"output":"red"}`, nil), 409)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/h1/calls/9/reply", `{"output":"red"}`, nil), 404)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/h1/calls/x/reply", `{}`, nil), 400)
	waitCalls(2, "pending")
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/h1/calls/2/reply", `{"error":"no sizes today"}`, nil), 202)

	row := jetruntest.WaitRow(t, b.store, "h1", 30*time.Second, func(r *model.Row) bool { return r.Status.Final() })
	if row.Status != events.StatusCompleted || row.Summary != "no sizes today" || string(row.Output) != `"blue"` {
		t.Fatalf("row %s %s %q %s", row.Status, row.Error, row.Summary, row.Output)
	}
	l = waitCalls(2, "failed")
	if l.Calls[0].State != "answered" {
		t.Fatalf("calls %+v", l)
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/h1/calls/2/reply", `{"output":1}`, nil), 409)
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/nope/calls", "", nil), 404)
}
