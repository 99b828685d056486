package parent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// The server goes away while Awaits are pending and comes back on the same
// port and store: every Await still returns its run's final result, and an
// Await begun while the server is away does too.
func TestAwaitsSeeTheirRunsEndAcrossAServerRestart(t *testing.T) {
	t.Parallel()
	outage := natstest.RunOutage(t)
	nc := outage.Conn
	g := &gated{runs: map[string]int{}, gates: map[string]chan struct{}{}}
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{Concurrency: 64}, func(w *worker.Worker) { w.Handle("gated", g) })
	c, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A second client, whose only Await begins while the server is away.
	late, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	const n = 20
	ids := make([]string, n+1)
	results := make([]string, n+1)
	var awaits sync.WaitGroup
	await := func(c *parent.Client, i int) {
		awaits.Go(func() {
			res, err := c.Await(ctx, ids[i])
			if err != nil {
				results[i] = "error: " + err.Error()
				return
			}
			results[i] = res.Summary
		})
	}
	for i := range n {
		ids[i] = fmt.Sprintf("aw-%d", i)
		if _, err := c.Dispatch(ctx, parent.Request{AgentType: "gated", RunID: ids[i], Input: map[string]int{}}); err != nil {
			t.Fatal(err)
		}
		await(c, i)
	}
	ids[n] = "aw-late"
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "gated", RunID: ids[n], Input: map[string]int{}}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		for _, id := range ids {
			if r, _, err := engine.From(rt).Store().Get(ctx, id); err != nil || r.Status != events.StatusRunning {
				return false
			}
		}
		return true
	}, "runs not running")

	outage.Stop()
	await(late, n) // begun while the server is away
	natstest.Eventually(t, 30*time.Second, func() bool { return outage.FailedReconnects() >= 10 },
		"the connection did not try to reconnect")
	outage.Start()
	for _, id := range ids {
		close(g.gate(id))
	}
	done := make(chan struct{})
	go func() { awaits.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Fatalf("Awaits still pending after the restart: %v", results)
	}
	for i, id := range ids {
		if results[i] != "opened "+id {
			t.Errorf("await %s: %q", id, results[i])
		}
	}
}

// logLines is a log sink, safe for concurrent writes, that tells when a
// line with a given text was written.
type logLines struct {
	mu   sync.Mutex
	text strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.Write(p)
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.text.String(), s)
}

// The server goes away after a replay of a live run began, and comes back
// on the same port and store: the replay, which could not reach the
// events meanwhile, goes on once it is back, with no error, no gap and no
// duplicate, until the run ends.
func TestReplayResumesAcrossAServerRestart(t *testing.T) {
	t.Parallel()
	outage := natstest.RunOutage(t)
	rt := jetruntest.OpenRuntime(t, outage.Conn, jetrun.Config{})
	gate := make(chan struct{})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("halves", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for i, half := range []string{"before", "after"} {
				if i == 1 {
					<-gate
				}
				if err := run.Chunk(ctx, half); err != nil {
					return worker.Result{}, err
				}
				if err := run.Flush(ctx); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{Summary: "done"}, nil
		})
	})
	logs := &logLines{}
	c, err := parent.New(rt, parent.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// No deadline: each JetStream request has its own timeout, as with a
	// CLI's context, instead of waiting for the deadline.
	ctx := t.Context()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "halves", RunID: "resumed", Input: 1}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, engine.From(rt).Store(), "resumed", 30*time.Second, func(r *model.Row) bool { return r.Chunks > 0 })
	seq, err := c.Replay(ctx, "resumed", parent.ReplayOptions{Kinds: []string{events.KindChunk, events.KindStatus}})
	if err != nil {
		t.Fatal(err)
	}
	outage.Stop() // before the replay reads a single event

	type result struct {
		chunks []string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		var last uint64
		for ev, err := range seq {
			if err != nil {
				r.err = err
				break
			}
			if ev.Seq <= last {
				r.err = fmt.Errorf("stream sequence went from %d to %d: a duplicate", last, ev.Seq)
				break
			}
			last = ev.Seq
			if ev.Chunk != nil {
				var text string
				_ = json.Unmarshal(ev.Chunk.Data, &text)
				r.chunks = append(r.chunks, text)
			}
		}
		done <- r
	}()
	// The replay meets the outage: it says it resumes (or, failing, ends).
	natstest.Eventually(t, 30*time.Second, func() bool {
		select {
		case r := <-done:
			t.Fatalf("the replay ended while the server was away: chunks %v, %v", r.chunks, r.err)
		default:
		}
		return logs.has("replay run events; resuming")
	}, "the replay did not meet the outage")
	outage.Start()
	close(gate)

	r := <-done
	// An outage longer than the worker's liveness runs the handler again:
	// its "before" comes once per attempt.
	if r.err != nil || len(r.chunks) < 2 || len(r.chunks) > 3 || r.chunks[0] != "before" || r.chunks[len(r.chunks)-1] != "after" {
		t.Fatalf("replay across the outage: chunks %v, %v; want before, after and no error", r.chunks, r.err)
	}
	if row, err := c.Inspect(ctx, "resumed"); err != nil || row.Status != events.StatusCompleted {
		t.Fatalf("the replay ended before the run: %+v %v", row, err)
	}
}

// A caller whose context ends while its dispatch is on the way does not
// fail the run: the dispatch may have landed (here it did: only its answer
// was held), and a run with a row whose dispatch did not land is published
// by the reconciler. The run completes.
func TestACallerLeavingDuringItsDispatchDoesNotFailTheRun(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	link := natstest.RunLink(t, ns)
	pnc, err := nats.Connect(link.URL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pnc.Close)
	nc, _ := natstest.Connect(t, ns)
	c, err := parent.New(jetruntest.OpenRuntime(t, pnc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	link.HoldAfter([]byte("jetrun.dispatch.echo ")) // the dispatch lands; its answer is held
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	go func() {
		<-ctx.Done()
		time.Sleep(100 * time.Millisecond) // the caller has seen its context end: the answer comes late
		link.Release()
	}()
	req := parent.Request{AgentType: "echo", RunID: "caller-left", Input: struct{}{}, Detached: &events.Detached{MaxBudgetMs: 60_000}}
	if _, err := c.Dispatch(ctx, req); err == nil {
		t.Fatal("the dispatch returned without its answer")
	}
	// A worker comes once the caller has left (Dispatch returns after
	// whatever it writes on its way out): its run is there for it.
	wrt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, wrt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("echo", func(context.Context, *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "done"}, nil
		})
	})
	row := jetruntest.WaitRow(t, engine.From(wrt).Store(), req.RunID, 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("the run of a caller that left during its dispatch: %s (%s: %s)", row.Status, row.Reason, row.Error)
	}
}
