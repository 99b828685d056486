package reconcile_test

import (
	"context"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/reconcile"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sweeps records what the reconciler reports.
type sweeps struct {
	mu      sync.Mutex
	givenUp int
}

func (s *sweeps) Swept(st reconcile.Stats, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.givenUp += st.GivenUp
}

func (s *sweeps) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.givenUp
}

// One Go program embeds every role: a parent client, a worker, a finish
// deliverer and the reconciler. A detached run that completes has its
// finish delivered; a detached run that goes on past its budget is given
// up by the reconciler (interrupted, budget-exceeded), its worker is told
// to stop, and its finish handler hears it.
func TestAnEmbeddedReconcilerGivesUpARunPastItsBudget(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	heard := make(chan finish.Result, 16)
	d, err := finish.New(env.Runtime, finish.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.HandleFunc("done", func(ctx context.Context, run *jetruntype.Run, res finish.Result) error {
		heard <- res
		return nil
	})
	startStop(t, d)

	stopped := make(chan struct{})
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("quick", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "quick"}, nil
		})
		w.HandleFunc("endless", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if err := run.Progress(ctx, worker.Progress{Fraction: 0.1, Message: "started"}); err != nil {
				return worker.Result{}, err
			}
			<-ctx.Done() // until told to stop
			close(stopped)
			return worker.Result{}, context.Cause(ctx)
		})
	})

	seen := &sweeps{}
	rec, err := reconcile.New(env.Runtime, reconcile.Config{Interval: 100 * time.Millisecond, Observer: seen})
	if err != nil {
		t.Fatal(err)
	}
	startStop(t, rec)

	client, err := parent.New(env.Runtime, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []parent.Request{
		{AgentType: "quick", RunID: "quick-1", Input: 1, Detached: &events.Detached{OnFinish: "done"}},
		{AgentType: "endless", RunID: "endless-1", Input: 1, Detached: &events.Detached{OnFinish: "done", MaxBudgetMs: 500}},
	} {
		if _, err := client.Dispatch(ctx, req); err != nil {
			t.Fatal(err)
		}
	}

	got := map[string]finish.Result{}
	for len(got) < 2 {
		select {
		case res := <-heard:
			got[finish.IdempotencyKey(res)] = res
		case <-ctx.Done():
			t.Fatalf("finishes heard: %v; want quick-1.completed and endless-1.interrupted", keys(got))
		}
	}
	if res, ok := got["quick-1.completed"]; !ok || res.Summary != "quick" {
		t.Fatalf("finishes heard: %v; want quick-1.completed", keys(got))
	}
	if res, ok := got["endless-1.interrupted"]; !ok || res.Reason != events.ReasonBudgetExceeded {
		t.Fatalf("finishes heard: %v; want endless-1.interrupted, budget-exceeded (reason %q)", keys(got), res.Reason)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the worker of the run given up was not told to stop")
	}
	row, err := client.Inspect(ctx, "endless-1")
	if err != nil || row.Status != events.StatusInterrupted || row.Reason != events.ReasonBudgetExceeded {
		t.Fatalf("endless-1: %+v, %v; want interrupted, budget-exceeded", row, err)
	}
	// A give-up between sweeps is counted with the next sweep's stats.
	natstest.Eventually(t, 30*time.Second, func() bool { return seen.total() >= 1 },
		"the observer did not hear of the run given up")
}

func keys(m map[string]finish.Result) []string {
	return slices.Sorted(maps.Keys(m))
}

// service is what startStop starts.
type service interface {
	Start(ctx context.Context) error
	Shutdown(ctx context.Context) error
	Stopped() <-chan struct{}
}

// startStop starts s and shuts it down at the test's cleanup.
func startStop(t *testing.T, s service) {
	t.Helper()
	if err := s.Start(context.WithoutCancel(t.Context())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-s.Stopped()
	})
}
