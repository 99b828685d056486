package bench_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// BenchmarkWorkloadReserve measures reservations on one tree
// (worker.Run.Reserve): 20 runs under one budgeted root, each making 200
// reports of 100 tokens as fast as it can, first without reserving (a
// budgeted tree's hot path: one compare-and-set per report on the root's
// row, the runs racing for it), then reserving before each report (a
// worker's reservations, and the charges of its runs that reserve, go to
// the row together: one compare-and-set for what was asked meanwhile).
// The runs are on one worker, then spread over four. It reports
// reservations per second on the tree, and reports per second both ways.
func BenchmarkWorkloadReserve(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { reserveOnOneTree(b, workers) })
	}
}

func reserveOnOneTree(b *testing.B, workers int) {
	const (
		runs    = 20
		reports = 200
		tokens  = 100
	)
	_, nc, _ := embeddedServer(b)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		phase   string // "report" or "reserve"
		start   chan struct{}
		ready   sync.WaitGroup // every run started
		done    sync.WaitGroup
		failure error
	)
	spend := func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		defer done.Done()
		mu.Lock()
		reserve, go_ := phase == "reserve", start
		mu.Unlock()
		ready.Done()
		<-go_
		for range reports {
			if reserve {
				if _, err := run.Reserve(ctx, worker.Usage{InputTokens: tokens}); err != nil {
					mu.Lock()
					failure = errors.Join(failure, err)
					mu.Unlock()
					return worker.Result{}, err
				}
			}
			if err := run.Usage(ctx, worker.Usage{InputTokens: tokens}); err != nil {
				mu.Lock()
				failure = errors.Join(failure, err)
				mu.Unlock()
				return worker.Result{}, err
			}
		}
		return worker.Result{}, nil
	}
	for i := 1; i < workers; i++ {
		rt := jetruntest.OpenRuntime(b, nc, jetrun.Config{})
		jetruntest.StartWorker(b, rt, worker.Config{Concurrency: runs/workers + 1}, func(w *worker.Worker) {
			w.HandleFunc("spender", spend)
		})
	}
	rt := jetruntest.OpenRuntime(b, nc, jetrun.Config{})
	jetruntest.StartWorker(b, rt, worker.Config{Concurrency: runs/workers + 2}, func(w *worker.Worker) {
		w.HandleFunc("spender", spend)
		w.HandleFunc("tree", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var kids []*worker.Child
			for i := range runs {
				k, err := run.Spawn(ctx, worker.ChildRequest{AgentType: "spender", CallID: fmt.Sprint("s", i), Input: i})
				if err != nil {
					return worker.Result{}, err
				}
				kids = append(kids, k)
			}
			for _, k := range kids {
				if _, err := k.Await(ctx); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{}, nil
		})
	})
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	round := func(name string, i int) time.Duration {
		mu.Lock()
		phase, start = name, make(chan struct{})
		go_ := start
		mu.Unlock()
		ready.Add(runs)
		done.Add(runs)
		id := fmt.Sprintf("reserve-bench-%s-%d", name, i)
		if _, err := client.Dispatch(ctx, parent.Request{AgentType: "tree", RunID: id, Input: 1,
			Budget: &events.TreeBudget{Tokens: 1 << 50}}); err != nil {
			b.Fatal(err)
		}
		ready.Wait() // every run started (waiting on go_) before the clock starts
		t0 := time.Now()
		close(go_)
		done.Wait()
		d := time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		if failure != nil {
			b.Fatal(failure)
		}
		return d
	}
	var plain, reserving time.Duration
	round("warmup", -1) // the server's file store and the worker's connections warm, as in the rounds after
	i := 0
	for b.Loop() {
		plain = round("report", i)
		reserving = round("reserve", i)
		i++
	}
	n := float64(runs * reports)
	b.ReportMetric(n/reserving.Seconds(), "reservations/s")
	b.ReportMetric(n/plain.Seconds(), "reports/s-without")
	b.ReportMetric(n/reserving.Seconds(), "reports/s-reserving")
	report("reserve", "workers", workers, "runs", runs, "reservations", runs*reports,
		"reservations_per_s_one_tree", n/reserving.Seconds(),
		"reports_per_s_without_reserving", n/plain.Seconds(),
		"us_per_report_without", float64(plain.Microseconds())/n,
		"us_per_reserve_and_report", float64(reserving.Microseconds())/n)
}
