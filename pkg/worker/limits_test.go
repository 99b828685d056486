package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/fakeprovider"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

var limitsFull = flag.Bool("limits.full", false, "run TestLimitFleet at the issue's scale: 8 workers × 50 runs (make test-limits)")

// caller is a handler that makes `calls` model calls to the fake provider
// at url, two at a time, each reserved on limit "fake" first; a 429 is
// returned as RetryAfter with the provider's delay (the limit pauses for
// the fleet).
func caller(url string, calls int, estimate int64, stop *atomic.Bool) worker.HandlerFunc {
	httpc := &http.Client{Timeout: 30 * time.Second}
	return func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		tenant := run.Row().Tenant
		var (
			mu       sync.Mutex
			rejected error
			wg       sync.WaitGroup
		)
		next := make(chan int, calls)
		for i := range calls {
			next <- i
		}
		close(next)
		for range 2 {
			wg.Go(func() {
				for i := range next {
					if stop.Load() {
						return // the test has what it measures: no tail of finishing runs
					}
					if err := call(ctx, run, httpc, url, tenant, estimate, estimate/2+int64(i*7)%(estimate/2+1)); err != nil {
						mu.Lock()
						rejected = cmpErr(rejected, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if rejected != nil {
			return worker.Result{}, rejected
		}
		return worker.Result{Summary: "done"}, nil
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func call(ctx context.Context, run *worker.Run, httpc *http.Client, url, tenant string, estimate, used int64) error {
	res, err := run.Reserve(ctx, worker.Usage{InputTokens: estimate}, worker.Limit("fake"))
	if err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s?tokens=%d&tenant=%s", url, used, tenant), nil)
	resp, err := httpc.Do(req)
	if err != nil {
		res.Release()
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	answered := time.Now()
	if resp.StatusCode == http.StatusTooManyRequests {
		res.Release()
		return jetruntype.RetryAfter(errors.New("provider: 429"), fakeprovider.RetryAfter(resp.Header))
	}
	return run.Usage(ctx, worker.Usage{InputTokens: used, AnsweredAtMs: answered.UnixMilli()})
}

// TestLimitFleet: workers × runs (two tenants at 10:1, weights 3:1), each
// run making calls to a fake provider through worker.Limit, the provider
// overloaded once. Every run completes; the provider never rejects a call
// past its own limits (only during the overload, which paused the limit
// for the fleet); each full window uses the limit to within 5 %; each
// tenant gets its weighted share of the fleet's windows to within 10 %,
// with the small tenant's runs spread over the workers or all on one.
func TestLimitFleet(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run(map[bool]string{false: "spread", true: "packed"}[packed], func(t *testing.T) { limitFleet(t, packed) })
	}
}

func limitFleet(t *testing.T, packed bool) {
	shape := struct {
		workers, runs, calls int
		window               time.Duration
		tokens, estimate     int64
	}{3, 22, 40, 4 * time.Second, 3000, 50}
	if *limitsFull {
		shape.workers, shape.runs, shape.calls, shape.window, shape.tokens, shape.estimate = 8, 50, 20, 3*time.Second, 20000, 100
	}
	p := &fakeprovider.Provider{Tokens: shape.tokens, Window: shape.window}
	p.Start()
	defer p.Close()
	var stop atomic.Bool // set once the windows measured are served
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st, err := limits.Open(ctx, env.JS, wire.Namespace(env.Namespace), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Spec{Name: "fake", Tokens: shape.tokens, WindowMs: shape.window.Milliseconds(),
		Weights: map[string]int{"big": 3, "small": 1}}); err != nil {
		t.Fatal(err)
	}
	for i := range shape.workers {
		nc, _ := natstest.Connect(t, env.Server)
		rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
		jetruntest.StartWorker(t, rt, worker.Config{ID: fmt.Sprintf("lw%d", i), Concurrency: shape.runs, MaxAttempts: 20},
			func(w *worker.Worker) {
				w.HandleFunc("caller", caller(p.URL(), shape.calls, shape.estimate, &stop))
				if i == 0 { // packed: only this worker takes the small tenant's runs
					w.HandleFunc("caller-small", caller(p.URL(), shape.calls, shape.estimate, &stop))
				}
			})
	}
	var reqs []parent.Request
	for i := range shape.workers * shape.runs {
		tenant, agent := "big", "caller"
		if i%11 == 0 {
			tenant = "small"
			if packed {
				agent = "caller-small"
			}
		}
		reqs = append(reqs, parent.Request{AgentType: agent, RunID: fmt.Sprintf("lf-%d", i), Input: json.RawMessage(`{}`), Tenant: tenant})
	}
	done := make(chan []parent.Outcome, 1)
	go func() { done <- env.Client.RunAll(ctx, reqs) }()
	natstest.Eventually(t, 5*time.Minute, func() bool { return len(p.Windows()) >= 2 }, "the provider serves two windows")
	p.Overload(shape.window / 2)
	natstest.Eventually(t, 5*time.Minute, func() bool { return len(p.Windows()) >= 6 }, "the provider serves six windows")
	stop.Store(true)
	outcomes := <-done
	for _, o := range outcomes {
		if o.Err != nil {
			t.Errorf("run %s: %v", o.RunID, o.Err)
		}
	}
	rule := fakeprovider.Rule(*limitsFull)
	ws := p.Windows()
	var big, small, overLimit, measured int64
	for i, w := range ws {
		overLimit += w.OverLimit
		t.Logf("window %d: %d requests, %d tokens (%.1f%%), %d rejected (%d past the limit), tenants %v",
			w.Index, w.Requests, w.Tokens, 100*float64(w.Tokens)/float64(shape.tokens), w.Rejected, w.OverLimit, w.Tenants)
		if i == 0 || i >= 5 || w.Rejected > 0 {
			continue // partial windows: the first, those from the stop on, the overload's
		}
		measured++
		if w.Tokens < shape.tokens*int64(rule.MinPercent)/100 {
			t.Errorf("window %d used %d tokens; want at least %d%% of %d", w.Index, w.Tokens, rule.MinPercent, shape.tokens)
		}
		big += w.Tenants["big"]
		small += w.Tenants["small"]
	}
	if p.Rejected() == 0 {
		t.Fatal("the provider never answered 429: no overload happened")
	}
	if overLimit > rule.MaxOver {
		t.Errorf("the provider rejected %d calls past its own limits; want at most %d", overLimit, rule.MaxOver)
	}
	if measured == 0 {
		t.Fatal("no full window to measure")
	}
	share := float64(small) / float64(big+small)
	t.Logf("%d calls rejected in all; small tenant's share %.3f (weights 3:1 → 0.25)", p.Rejected(), share)
	if share < 0.25*0.9 || share > 0.25*1.1 || 1-share < 0.75*0.9 {
		t.Errorf("tenant shares: small %.3f, big %.3f; want each within 10%% of 0.25 and 0.75", share, 1-share)
	}
}

// A run waiting for room on a limit shows it on its row as what it waits
// for; the wait ends when the limit has room.
func TestRunWaitingOnALimitShowsIt(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st, err := limits.Open(ctx, env.JS, wire.Namespace(env.Namespace), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Spec{Name: "slot", Concurrent: 1}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("hold", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			res, err := run.Reserve(ctx, worker.Usage{}, worker.Limit("slot"))
			if err != nil {
				return worker.Result{}, err
			}
			defer res.Release()
			if run.Row().ID == "first" {
				<-release
			}
			return worker.Result{Summary: "held"}, nil
		})
	})
	if _, err := env.Client.Dispatch(ctx, parent.Request{AgentType: "hold", RunID: "first", Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, env.Store, "first", 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	if _, err := env.Client.Dispatch(ctx, parent.Request{AgentType: "hold", RunID: "second", Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, env.Store, "second", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "limit:slot" })
	close(release)
	row := jetruntest.WaitRow(t, env.Store, "second", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.WaitingFor != "" {
		t.Fatalf("second: %s, waiting for %q", row.Status, row.WaitingFor)
	}
	_, err = env.Client.Run(ctx, parent.Request{AgentType: "hold", RunID: "third", Input: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
}

// Reserving on a limit no one configured fails the reservation with the
// configured names and reserves nothing.
func TestReserveOnAnUnknownLimit(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st, err := limits.Open(ctx, env.JS, wire.Namespace(env.Namespace), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Spec{Name: "openai-gpt", Requests: 10}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("u", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			_, err := run.Reserve(ctx, worker.Usage{InputTokens: 5}, worker.Limit("gemini"))
			got <- err
			return worker.Result{}, jetruntype.Cancel(err)
		})
	})
	if _, err := env.Client.Dispatch(ctx, parent.Request{AgentType: "u", RunID: "u1", Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	err = <-got
	if !errors.Is(err, worker.ErrUnknownLimit) || !strings.Contains(err.Error(), "openai-gpt") {
		t.Fatalf("reserve on an unknown limit: %v; want ErrUnknownLimit naming openai-gpt", err)
	}
}
