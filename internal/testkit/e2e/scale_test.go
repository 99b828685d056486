package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// each runs fn(i) for i in 0..n-1 from workers goroutines and fails t with
// every error.
func each(t *testing.T, n, workers int, fn func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		t.Fatalf("%d of %d failed; first: %v", len(all), n, all[0])
	}
}

// warnLog counts a worker's log records at Warn and above by message and
// error, with run ids folded out.
type warnLog struct {
	ids    *regexp.Regexp
	mu     sync.Mutex
	counts map[string]int
}

func (l *warnLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *warnLog) Handle(_ context.Context, r slog.Record) error {
	key := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" || a.Key == "error" || a.Key == "cause" {
			key += ": " + a.Value.String()
		}
		return true
	})
	key = l.ids.ReplaceAllString(key, "<run>")
	l.mu.Lock()
	l.counts[key]++
	l.mu.Unlock()
	return nil
}
func (l *warnLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *warnLog) WithGroup(string) slog.Handler      { return l }

// summary returns the number of records and the five most frequent kinds.
func (l *warnLog) summary() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	total := 0
	keys := make([]string, 0, len(l.counts))
	for k, c := range l.counts {
		total += c
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return l.counts[b] - l.counts[a] })
	var sb strings.Builder
	for _, k := range keys[:min(5, len(keys))] {
		fmt.Fprintf(&sb, "  %d× %s\n", l.counts[k], k)
	}
	return total, sb.String()
}

// loaded prints a counter's value when formatted.
type loaded struct{ n *atomic.Int64 }

func (l loaded) String() string { return fmt.Sprint(l.n.Load()) }

// 3,000 runs held in flight by one worker process against a nats-server with
// default limits (1,000 consumers per stream): each can be cancelled, each
// can complete. Half are cancelled (each ends aborted and its handler sees
// its context cancelled), the other half are released (each ends completed).
func TestThreeThousandRunsInFlightOnADefaultServer(t *testing.T) {
	const n = 3_000
	opts := &server.Options{}
	ns := natstest.RunServerWithOptions(t, opts)
	if got := opts.JetStreamLimits.DefaultMaxConsumers; got != server.JSDefaultMaxConsumersPerStream {
		t.Fatalf("server runs with %d consumers per stream, not the default %d", got, server.JSDefaultMaxConsumersPerStream)
	}
	wnc, _ := natstest.Connect(t, ns)
	cnc, _ := natstest.Connect(t, ns)
	ctx := context.Background()

	ids := make([]string, n)
	release := make(map[string]chan struct{}, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("held-%d", i)
		release[ids[i]] = make(chan struct{})
	}
	var (
		mu         sync.Mutex
		starts     = map[string]int{}
		sawCancel  = map[string]error{} // the cause each handler saw
		lastStart  time.Time
		running    atomic.Int64
		handlerEnd atomic.Int64
	)
	warnings := &warnLog{ids: regexp.MustCompile(`held-[0-9]+`), counts: map[string]int{}}
	rtWnc := jetruntest.OpenRuntime(t, wnc, jetrun.Config{})
	jetruntest.StartWorker(t, rtWnc, worker.Config{Concurrency: n, FleetConcurrency: n, Logger: slog.New(warnings)}, func(w *worker.Worker) {
		w.HandleFunc("held", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			mu.Lock()
			starts[run.ID()]++
			lastStart = time.Now()
			mu.Unlock()
			running.Add(1)
			defer func() {
				running.Add(-1)
				handlerEnd.Add(1)
			}()
			select {
			case <-ctx.Done():
				mu.Lock()
				sawCancel[run.ID()] = context.Cause(ctx)
				mu.Unlock()
				return worker.Result{}, context.Cause(ctx)
			case <-release[run.ID()]:
				return worker.Result{Summary: "released"}, nil
			}
		})
	})
	rtCnc := jetruntest.OpenRuntime(t, cnc, jetrun.Config{})
	client, err := parent.New(rtCnc, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	each(t, n, 8, func(i int) error {
		_, err := client.Dispatch(ctx, parent.Request{AgentType: "held", RunID: ids[i], Input: i})
		return err
	})
	natstest.Eventually(t, 3*time.Minute, func() bool { return running.Load() == n },
		"%s of %d runs in flight", loaded{&running}, n)
	t.Logf("%d runs in flight %s after the first dispatch", n, time.Since(began).Round(time.Millisecond))
	// Hold them all past any start-up grace a worker gives a young run (the
	// current worker starts watching a row for cancels 200ms into the run).
	natstest.Eventually(t, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return time.Since(lastStart) > time.Second
	}, "runs kept starting")
	if got := running.Load(); got != n {
		t.Fatalf("only %d of %d runs still in flight before any cancel or release", got, n)
	}

	cancelled, released := ids[:n/2], ids[n/2:]
	each(t, len(cancelled), 16, func(i int) error {
		_, err := client.Cancel(ctx, cancelled[i], "scale test")
		return err
	})
	for _, id := range released {
		close(release[id])
	}
	natstest.Eventually(t, 3*time.Minute, func() bool { return handlerEnd.Load() == n },
		"%s of %d handlers returned", loaded{&handlerEnd}, n)
	t.Logf("all %d handlers returned %s after the first dispatch", n, time.Since(began).Round(time.Millisecond))

	store := engine.From(rtCnc).Store()
	for _, id := range cancelled {
		row := jetruntest.WaitRow(t, store, id, time.Minute, jetruntest.Final)
		mu.Lock()
		cause, saw := sawCancel[id]
		mu.Unlock()
		if row.Status != events.StatusAborted || !saw || !errors.Is(cause, worker.ErrCancelled) {
			t.Errorf("cancelled %s: status %s, handler saw cancel %v (cause %v)", id, row.Status, saw, cause)
		}
	}
	for _, id := range released {
		row := jetruntest.WaitRow(t, store, id, time.Minute, jetruntest.Final)
		mu.Lock()
		cause, saw := sawCancel[id]
		mu.Unlock()
		if row.Status != events.StatusCompleted || saw {
			t.Errorf("released %s: status %s %s; handler saw its context end: %v", id, row.Status, row.Error, cause)
		}
	}
	// Holding, cancelling and completing runs is the worker's normal work:
	// nothing in it is worth a warning (a server limit hit, a lease renewal
	// failing, a lease lost …).
	if total, top := warnings.summary(); total > 0 {
		t.Errorf("the worker logged %d warnings or errors; most frequent:\n%s", total, top)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if starts[id] != 1 {
			t.Errorf("%s: handler started %d times, want once", id, starts[id])
		}
	}
}

// A child-worker process holding 300 runs parked on an approval is killed
// with -9. A second child-worker takes every run over (attempt 2), resumes
// after its milestones, and once approved every run completes exactly once
// with no finished step done twice. (On a machine so busy that the first
// worker's liveness lapses while the runs start, a run it handed off and
// took up again has one more attempt, a hand-off: listed in blinks when
// the worker recorded its lapse, or not when the reconciler's question to
// the live holder released it first. The attempts that count, attempt
// minus hand-offs, are still two.)
func TestKilledChildWorkerWithHundredsOfWaitingRuns(t *testing.T) {
	t.Parallel()
	const n = 300
	e := newEnv(t)
	big := map[string]string{"JETRUN_CONCURRENCY": "400", "JETRUN_LEASE": "2s", "JETRUN_LOG_LEVEL": "info"}
	a := e.childWorker(t, "child-many-a", big)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("many-%d", i)
	}
	// Step 1 runs, then each run parks before step 2 until approved.
	each(t, n, 8, func(i int) error {
		_, err := e.client.Dispatch(context.Background(), parent.Request{
			AgentType: demo.AgentType, RunID: ids[i],
			Input: map[string]int{"steps": 3, "stepMs": 10, "approveAt": 2},
		})
		return err
	})
	for _, id := range ids {
		jetruntest.WaitRow(t, e.store, id, 2*time.Minute, func(r *model.Row) bool {
			return r.Worker == "child-many-a" && r.WaitingFor == demo.ApprovalSignal && r.Milestones == 1
		})
	}
	e.childWorker(t, "child-many-b", big)
	a.kill()
	killed := time.Now()

	for _, id := range ids {
		jetruntest.WaitRow(t, e.store, id, 2*time.Minute, func(r *model.Row) bool {
			return r.Attempt-r.Handoffs == 2 && r.Worker == "child-many-b" && r.Status == events.StatusRunning
		})
	}
	t.Logf("all %d runs taken over %s after kill -9 (lease 2s)", n, time.Since(killed).Round(10*time.Millisecond))
	each(t, n, 8, func(i int) error {
		_, err := e.client.Signal(context.Background(), ids[i], demo.ApprovalSignal, map[string]bool{"approved": true})
		return err
	})

	wantNames := []string{"step-1", "approved", "step-2", "step-3"}
	for _, id := range ids {
		row := jetruntest.WaitRow(t, e.store, id, 2*time.Minute, jetruntest.Final)
		if row.Status != events.StatusCompleted || row.Attempt-row.Handoffs != 2 || row.Handoffs < len(row.Blinks) {
			t.Errorf("%s: %s attempt %d (handoffs %d, blinks %v) %s", id, row.Status, row.Attempt, row.Handoffs, row.Blinks, row.Error)
			continue
		}
		// The attempt that completes runs steps 2 and 3 only: the takeover
		// resumes after step 1 and the approval. If a lapse of the worker
		// that took over stopped an attempt after the takeover (a blink; its
		// 300 takeovers at once can starve it past a 2 s lease), that attempt
		// may have run step 2 already; every milestone is still reached once
		// (below).
		var out demo.Output
		err := json.Unmarshal(row.Output, &out)
		resumed := out.StepsRunHere == 2 || (row.Handoffs > 0 && out.StepsRunHere == 1)
		if err != nil || !resumed || out.Attempt != row.Attempt {
			t.Errorf("%s: output %s: attempt %d (blinks %v) should run steps 2 and 3 only, or what a lapsed attempt left",
				id, row.Output, row.Attempt, row.Blinks)
		}
		evs := waitFinalEvent(t, e.js, id)
		completed := 0
		for _, s := range jetruntest.Statuses(evs) {
			if s == events.StatusCompleted {
				completed++
			} else if s.Final() {
				t.Errorf("%s: a %s status event", id, s)
			}
		}
		if completed != 1 {
			t.Errorf("%s: %d completed status events, want exactly 1: %v", id, completed, jetruntest.Statuses(evs))
		}
		var names []string
		for _, m := range jetruntest.Milestones(evs) {
			names = append(names, m.Name)
		}
		if !slices.Equal(names, wantNames) {
			t.Errorf("%s: milestones %v, want each of %v once, in order", id, names, wantNames)
		}
		if got := jetruntest.MilestoneSeqs(evs); !slices.Equal(got, oneTo(len(wantNames))) {
			t.Errorf("%s: milestone sequences %v", id, got)
		}
	}
}
