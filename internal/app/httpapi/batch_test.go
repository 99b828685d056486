package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

type batchResults struct {
	Results []struct {
		RunID  string `json:"runId"`
		Status int    `json:"status"`
		Code   string `json:"code"`
		Error  string `json:"error"`
		Run    *struct {
			ID     string        `json:"id"`
			Status events.Status `json:"status"`
		} `json:"run"`
	} `json:"results"`
}

// TestDispatchBatchAnswersEachRun posts a batch mixing good runs with a
// bad id, an unknown agent type, an oversize input and a missing input:
// each bad one has its own status and code, the good ones run, and the
// same batch again re-attaches (200) what has a run id.
func TestDispatchBatchAnswersEachRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := strings.Repeat("x", events.MaxInputBytes)
	body := `{"runs":[
		{"agentType":"demo","runId":"b1","input":{"steps":1,"stepMs":0}},
		{"agentType":"demo","runId":"bad id","input":{}},
		{"agentType":"nobody","runId":"b2","input":{}},
		{"agentType":"demo","runId":"b3","input":"` + big + `"},
		{"agentType":"demo","runId":"b4"},
		{"agentType":"demo","input":{"steps":1,"stepMs":0}}
	]}`
	var got batchResults
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:batch", body, &got), 200)
	want := []struct {
		status int
		code   string
	}{{201, ""}, {400, "bad_request"}, {422, "unknown_agent_type"}, {400, "bad_request"}, {400, "bad_request"}, {201, ""}}
	if len(got.Results) != len(want) {
		t.Fatalf("%d results: %+v", len(got.Results), got)
	}
	for i, w := range want {
		r := got.Results[i]
		if r.Status != w.status || r.Code != w.code || (w.status == 201) != (r.Run != nil && r.Run.ID == r.RunID) {
			t.Errorf("result %d = %+v, want %d %q", i, r, w.status, w.code)
		}
	}
	if !strings.Contains(got.Results[3].Error, "input") {
		t.Errorf("oversize input: %q", got.Results[3].Error)
	}
	generated := got.Results[5].RunID
	for _, id := range []string{"b1", generated} {
		jetruntest.WaitRow(t, b.store, id, 10*time.Second, jetruntest.Final)
	}

	// Again: the run with an id re-attaches; the one without gets a new id
	// (and a new run), as POST /v1/runs does.
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:batch", body, &got), 200)
	if r := got.Results[0]; r.Status != 200 || r.Run == nil || r.Run.Status != events.StatusCompleted {
		t.Errorf("again: %+v", r)
	}
	if r := got.Results[5]; r.Status != 201 || r.RunID == generated {
		t.Errorf("again, without an id: %+v", r)
	}
}

// TestDispatchBatchBounds refuses an empty batch (400), one over
// MaxBatchRuns runs and one over MaxBatchBodyBytes (413), dispatching
// nothing.
func TestDispatchBatchBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var e struct{ Code, Error string }
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:batch", `{"runs":[]}`, &e), 400)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:batch", `[{"agentType":"demo","input":{}}]`, &e), 400)

	runs := make([]string, httpapi.MaxBatchRuns+1)
	for i := range runs {
		runs[i] = fmt.Sprintf(`{"agentType":"demo","runId":"over-%d","input":{}}`, i)
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:batch", `{"runs":[`+strings.Join(runs, ",")+`]}`, &e), 413)
	if e.Code != "too_large" || !strings.Contains(e.Error, fmt.Sprint(httpapi.MaxBatchRuns)) {
		t.Fatalf("too many runs: %+v", e)
	}
	input, _ := json.Marshal(strings.Repeat("x", httpapi.MaxBatchBodyBytes))
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:batch", `{"runs":[{"agentType":"demo","runId":"huge","input":`+string(input)+`}]}`, &e), 413)
	if e.Code != "too_large" {
		t.Fatalf("too big a body: %+v", e)
	}
	var row struct{ Code string }
	for _, id := range []string{"over-0", "huge"} {
		wantStatus(t, do(t, "GET", b.url+"/v1/runs/"+id, "", &row), 404)
	}
}
