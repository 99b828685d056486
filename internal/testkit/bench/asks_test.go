package bench_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// BenchmarkWorkloadAsksList: 1,000 runs wait, each on an approve ask; GET
// /v1/asks?status=open&limit=1000 lists the 1,000 from the parent-worker's
// index (a watch of jetrun_asks), not a scan of rows: the list's latency
// over the HTTP API, whole response read (issue 37's goal: ≤ 100 ms).
func BenchmarkWorkloadAsksList(b *testing.B) {
	const runs, samples = 1000, 200
	_, nc, _ := embeddedServer(b)
	ctx := context.Background()
	startWorker(b, nc, concurrency, "asker", func(ctx context.Context, r *worker.Run) (worker.Result, error) {
		_, err := r.Wait(ctx, "approve", worker.Ask{Kind: events.AskApprove, Title: "ship " + r.ID() + "?",
			Payload: map[string]any{"run": r.ID(), "diff": "+12 -3 in handler.go"}})
		return worker.Result{}, err
	})
	rt := jetruntest.OpenRuntime(b, nc, jetrun.Config{})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	view, err := runview.Start(ctx, rt, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(view.Stop)
	askView, err := asks.StartView(ctx, engine.From(rt).Asks(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(askView.Stop)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Client: client, View: view, Conn: nc,
		Asks: engine.From(rt).Asks(), AskView: askView}))
	b.Cleanup(srv.Close)

	fanOut(b, runs, 32, func(i int) error {
		_, err := client.Dispatch(ctx, parent.Request{AgentType: "asker", RunID: fmt.Sprintf("ask-%d", i), Input: i})
		return err
	})
	natstest.Eventually(b, 5*time.Minute, func() bool {
		p, _ := askView.List(asks.Filter{Status: events.AskOpen})
		return p.Total == runs
	}, "%d open asks never listed", runs)

	url := srv.URL + "/v1/asks?status=open&limit=1000"
	var took []time.Duration
	var size int
	for b.Loop() {
		took = took[:0]
		for range samples {
			t0 := time.Now()
			resp, err := http.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
			}
			took = append(took, time.Since(t0))
			size = len(body)
		}
	}
	slices.Sort(took)
	b.ReportMetric(ms(percentile(took, 0.5)), "asks-list-1000-p50-ms")
	b.ReportMetric(ms(percentile(took, 0.99)), "asks-list-1000-p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "asks-list-1000-max-ms")
	b.Logf("GET /v1/asks over %d open asks of %d waiting runs (%d KiB): p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d samples)",
		runs, runs, size>>10, ms(percentile(took, 0.5)), ms(percentile(took, 0.99)), ms(took[len(took)-1]), samples)
}
