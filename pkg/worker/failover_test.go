package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(b.buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// On a three-node cluster with R3 streams and buckets, the node that leads
// JETRUN_EVENTS goes away while runs stream: a leader election, with quorum
// kept. Every run completes on its first attempt, no handler sees an error
// and the workers write a bounded number of log lines.
func TestEventsLeaderLossUnderLoad(t *testing.T) {
	t.Parallel()
	const runs, chunks = 200, 40
	servers := natstest.RunCluster(t)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	connect := func(first int) *nats.Conn {
		t.Helper()
		// Each process prefers another node, as a fleet would.
		order := append(append([]string{}, urls[first:]...), urls[:first]...)
		nc, err := nats.Connect(strings.Join(order, ","), nats.DontRandomize(), nats.MaxReconnects(-1),
			nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var handlerErrs atomic.Int64
	var firstErr atomic.Value
	release := make(chan struct{})
	handler := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		for i := 1; i <= chunks; i++ {
			if i == chunks/2 {
				select {
				case <-release:
				case <-ctx.Done():
					return worker.Result{}, ctx.Err()
				}
			}
			if err := run.Chunk(ctx, i); err != nil {
				if errors.Is(err, worker.ErrLeaseLost) {
					// The worker could not renew its liveness in time
					// (a slow, loaded machine): another attempt goes on.
					return worker.Result{}, err
				}
				if handlerErrs.Add(1) == 1 {
					firstErr.Store(err)
				}
				return worker.Result{}, err
			}
			select { // the handler's own pace between chunks
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		}
		return worker.Result{Summary: "done"}, nil
	})
	cfg := worker.Config{Concurrency: runs, Logger: logger}
	for i := range 2 {
		rt := jetruntest.OpenRuntime(t, connect(i+1), jetrun.Config{Streams: events.StreamOptions{Replicas: 3}})
		startWorkerOn(t, rt, cfg, map[string]worker.Handler{"stream": handler})
	}
	nc := connect(0)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitForStreamLeaders(t, js, "JETRUN_EVENTS", "JETRUN_DISPATCH", "KV_jetrun_runs", "KV_jetrun_active")
	ctx := context.Background()
	for i := range runs {
		publish(t, js, "jetrun.dispatch.stream", fmt.Sprintf(`{"runId":"f%d","input":{}}`, i))
	}
	store, err := runstore.Open(ctx, js, runstore.Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Every run has streamed half its chunks and waits: take the events
	// leader away, then let them go on.
	natstest.Eventually(t, 60*time.Second, func() bool {
		n := 0
		for i := range runs {
			if row, _, err := store.Get(ctx, fmt.Sprintf("f%d", i)); err == nil && row.Status == events.StatusRunning {
				n++
			}
		}
		return n == runs
	}, "not every run started")
	s, err := js.Stream(ctx, "JETRUN_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	var victim *server.Server
	for _, srv := range servers {
		if srv.Name() == leader {
			victim = srv
		}
	}
	if victim == nil {
		t.Fatalf("no server named %q leads JETRUN_EVENTS", leader)
	}
	before := len(logs.lines())
	began := time.Now()
	victim.Shutdown()
	close(release)
	victim.WaitForShutdown()

	counts := map[events.Status]int{}
	natstest.Eventually(t, 120*time.Second, func() bool {
		clear(counts)
		for i := range runs {
			row, _, err := store.Get(ctx, fmt.Sprintf("f%d", i))
			if err != nil {
				return false
			}
			counts[row.Status]++
		}
		return counts[events.StatusCompleted]+counts[events.StatusError]+counts[events.StatusAborted] == runs
	}, "runs not final: %v", counts)
	took := time.Since(began)
	attempts := 0
	for i := range runs {
		row, _, err := store.Get(ctx, fmt.Sprintf("f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if row.Attempt > 1 {
			attempts++
		}
	}
	lines := logs.lines()[before:]
	t.Logf("leader %s of JETRUN_EVENTS lost under %d runs: %v after %s, %d taken over, %d handler errors, %d warn lines",
		leader, runs, counts, took.Round(time.Millisecond), attempts, handlerErrs.Load(), len(lines))
	byMsg := map[string]int{}
	for _, l := range lines {
		msg := l
		if i := strings.Index(l, "msg="); i >= 0 {
			msg = l[i:]
			if j := strings.Index(msg, " worker="); j >= 0 {
				msg = msg[:j]
			}
		}
		byMsg[msg]++
	}
	for _, l := range lines {
		if strings.Contains(l, "liveness") || strings.Contains(l, "last events") || strings.Contains(l, "final status") {
			t.Log(l)
		}
	}
	for msg, n := range byMsg {
		t.Logf("%5d × %s", n, msg)
	}
	if counts[events.StatusCompleted] != runs || handlerErrs.Load() != 0 {
		t.Fatalf("%v, handler errors %d (first: %v)", counts, handlerErrs.Load(), firstErr.Load())
	}
	// Each message and class of fault at most once per 10 s per worker:
	// a few dozen messages could.
	if bound := 2 * 30 * (1 + int(took/(10*time.Second))); len(lines) > bound {
		t.Fatalf("%d warn lines during %s, want at most %d", len(lines), took, bound)
	}
}
