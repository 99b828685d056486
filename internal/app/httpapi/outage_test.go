package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// logSink is a log sink safe for concurrent writes.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logSink) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logSink) lines() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), "\n")
}

// The server goes away while a client follows a run's events and the runs
// view watches the bucket, and comes back on the same port and store: the
// event stream stays open and goes on after the last event it sent (no
// reconnect by the client, no gap), and the outage costs a bounded number
// of log lines, not a hot loop.
func TestEventStreamAndRunsViewOutliveAnOutage(t *testing.T) {
	t.Parallel()
	outage := natstest.RunOutage(t)
	nc := outage.Conn
	logs := &logSink{}
	logger := slog.New(slog.NewTextHandler(logs, nil))

	started, gate := make(chan struct{}), make(chan struct{})
	var startedOnce sync.Once
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("outage", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if err := run.Chunk(ctx, "before"); err != nil {
				return worker.Result{}, err
			}
			if err := run.Flush(ctx); err != nil {
				return worker.Result{}, err
			}
			startedOnce.Do(func() { close(started) }) // an outage longer than a lease may start it again
			<-gate
			if err := run.Chunk(ctx, "after"); err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: "done"}, nil
		})
	})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	view, err := runview.Start(context.Background(), rt, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Stop)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Client: client, View: view, Conn: nc, Logger: logger}))
	t.Cleanup(srv.Close)

	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "outage", RunID: "o1", Input: map[string]int{}}); err != nil {
		t.Fatal(err)
	}
	<-started
	first := make(chan struct{})
	got := make(chan []sseEvent, 1)
	go func() {
		var once sync.Once
		got <- readSSE(t, srv.URL+"/v1/runs/o1/events", "", func(e sseEvent) bool {
			if e.event == "chunk" {
				once.Do(func() { close(first) })
			}
			return e.event == "end"
		})
	}()
	<-first

	outage.Stop()
	before := logs.lines()
	natstest.Eventually(t, 30*time.Second, func() bool { return outage.FailedReconnects() >= 50 },
		"the connection did not try to reconnect")
	// Viewers keep asking while the server is away (an EventSource
	// reconnects every few seconds): each gets its answer, the log one
	// line per interval, not one per request.
	var asks sync.WaitGroup
	for range 20 {
		asks.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/runs/o1/events", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	asks.Wait()
	lines := logs.lines() - before
	outage.Start()
	close(gate)

	evs := <-got
	var kinds, chunks []string
	for _, e := range evs {
		kinds = append(kinds, e.event)
		if e.event == "chunk" {
			chunks = append(chunks, e.data)
		}
	}
	// If the outage outlasted the worker's liveness, a second attempt ran
	// the handler again: its "before" comes twice, each once per attempt.
	if len(chunks) < 2 || len(chunks) > 3 || !strings.Contains(chunks[0], "before") ||
		!strings.Contains(chunks[len(chunks)-1], "after") || kinds[len(kinds)-1] != "end" {
		t.Fatalf("one stream across the outage: events %v, chunks %v", kinds, chunks)
	}
	if lines > 5 {
		t.Fatalf("%d log lines while the server was away:\n%s", lines, logs.buf.String())
	}
}
