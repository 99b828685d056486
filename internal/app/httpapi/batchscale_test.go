package httpapi_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// TestDispatchBatchStoresEachRunOnce posts a full batch (MaxBatchRuns runs)
// holding bad ids, oversize inputs, missing inputs and repeated run ids,
// with no worker running: each bad run has its own 400, a repeated id
// answers 200 for the same run, and the server stores exactly one dispatch
// and one row per good run.
func TestDispatchBatchStoresEachRunOnce(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	client, err := parent.New(env.Runtime, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	view, err := runview.Start(context.Background(), env.Runtime, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Stop)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Client: client, View: view, Conn: env.Conn}))
	t.Cleanup(srv.Close)
	ns := wire.Namespace(env.Namespace)
	runsStream := wire.BucketStream(ns.RunsBucket())
	storedBefore := func() (uint64, uint64) {
		return streamLast(t, env, ns.DispatchStream()), streamLast(t, env, runsStream)
	}
	dispatches0, rows0 := storedBefore()

	big := strings.Repeat("x", events.MaxInputBytes)
	var runs []string
	var want []int
	good := 0
	for i := 0; len(runs) < httpapi.MaxBatchRuns; i++ {
		switch {
		case i%100 == 10:
			runs = append(runs, fmt.Sprintf(`{"agentType":"bulk","runId":"bad id %d","input":1}`, i))
			want = append(want, 400)
		case i%100 == 20:
			runs = append(runs, fmt.Sprintf(`{"agentType":"bulk","runId":"big-%d","input":"%s"}`, i, big))
			want = append(want, 400)
		case i%100 == 30:
			runs = append(runs, fmt.Sprintf(`{"agentType":"bulk","runId":"none-%d"}`, i))
			want = append(want, 400)
		case i%100 == 40:
			runs = append(runs, fmt.Sprintf(`{"agentType":"bulk","runId":"b-%d","input":2}`, i-39))
			want = append(want, 200)
		default:
			runs = append(runs, fmt.Sprintf(`{"agentType":"bulk","runId":"b-%d","input":1}`, i))
			want = append(want, 201)
			good++
		}
	}
	var got batchResults
	wantStatus(t, do(t, "POST", srv.URL+"/v1/runs:batch", `{"runs":[`+strings.Join(runs, ",")+`]}`, &got), 200)
	if len(got.Results) != len(runs) {
		t.Fatalf("%d results for %d runs", len(got.Results), len(runs))
	}
	for i, r := range got.Results {
		if r.Status != want[i] || (want[i] < 300) != (r.Run != nil && r.Run.ID == r.RunID && r.Run.Status == events.StatusStarting) {
			t.Fatalf("result %d = %+v, want %d", i, r, want[i])
		}
		if want[i] == 400 && r.Code != "bad_request" {
			t.Fatalf("result %d = %+v, want code bad_request", i, r)
		}
	}
	dispatches, rows := storedBefore()
	if dispatches-dispatches0 != uint64(good) || rows-rows0 != uint64(good) {
		t.Fatalf("stored %d dispatches and %d row writes for %d runs, want one each", dispatches-dispatches0, rows-rows0, good)
	}
}

// streamLast is the last sequence stream has stored.
func streamLast(t *testing.T, env *jetruntest.Env, stream string) uint64 {
	t.Helper()
	s, err := env.JS.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}
