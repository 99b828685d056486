package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// spendLoop reports tokens per tick until the run's tree is stopped (or
// its context ends) and returns what that gave.
func spendLoop(ctx context.Context, run *worker.Run, tokens int64) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := run.Usage(ctx, worker.Usage{InputTokens: tokens, Model: "m"}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// Reports add up on the run's row (totals and per model); a nested run's
// usage adds to its root's tree totals, the root's own included.
func TestUsageAddsUpOnRowAndTree(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{Concurrency: 2}, map[string]worker.Handler{
		"spender": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for _, u := range []worker.Usage{
				{InputTokens: 10, OutputTokens: 5, CostMicros: 7, Model: "big"},
				{InputTokens: 1, OutputTokens: 2, CostMicros: 3, Model: "small"},
				{InputTokens: 100},
			} {
				if err := run.Usage(ctx, u); err != nil {
					return worker.Result{}, err
				}
			}
			if run.Depth() == 0 {
				if _, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "spender", CallID: "c", Input: 1}); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{Summary: "ok"}, nil
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, parent.Request{AgentType: "spender", RunID: "u-top", Input: 1}); err != nil {
		t.Fatal(err)
	}
	own := jetruntype.UsageTotals{InputTokens: 111, OutputTokens: 7, CostMicros: 10}
	for _, id := range []string{"u-top", parent.RunID("u-top", "c")} {
		row, _, err := b.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if row.Usage == nil || row.Usage.UsageTotals != own ||
			row.Usage.Models["big"] != (jetruntype.UsageTotals{InputTokens: 10, OutputTokens: 5, CostMicros: 7}) ||
			row.Usage.Models["small"] != (jetruntype.UsageTotals{InputTokens: 1, OutputTokens: 2, CostMicros: 3}) {
			t.Fatalf("%s: usage %+v, want %+v with big and small", id, row.Usage, own)
		}
	}
	top := jetruntest.WaitRow(t, b.store, "u-top", 10*time.Second, func(r *model.Row) bool {
		return r.TreeUsage != nil && *r.TreeUsage == own.Add(own)
	})
	if top.Root != "" {
		t.Fatalf("top root %q", top.Root)
	}
}

// A three-level tree past its token budget stops at every level: each row
// ends interrupted, reason budget-exceeded, saying which budget and by how
// much; the detached root's finish handler hears it once.
func TestTreeBudgetStopsThreeLevels(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{Concurrency: 4}, map[string]worker.Handler{
		"level": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if run.Depth() == 2 {
				return worker.Result{}, spendLoop(ctx, run, 100)
			}
			if err := run.Usage(ctx, worker.Usage{OutputTokens: 10}); err != nil {
				return worker.Result{}, err
			}
			_, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "level", CallID: "down", Input: 1})
			return worker.Result{}, err
		}),
	})
	rt := jetruntest.OpenRuntime(t, b.nc, jetrun.Config{})
	d, err := finish.New(rt, finish.Config{RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		heard []events.Status
	)
	d.Handle("budget-hook", finish.HandlerFunc(func(_ context.Context, _ *jetruntype.Run, res finish.Result) error {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, res.Status)
		return nil
	}))
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "level", RunID: "b3", Input: 1,
		Detached: &events.Detached{OnFinish: "budget-hook"}, Budget: &events.TreeBudget{Tokens: 1000}}); err != nil {
		t.Fatal(err)
	}
	mid := parent.RunID("b3", "down")
	leaf := parent.RunID(mid, "down")
	stopped := func(r *model.Row) bool {
		return r.Status == events.StatusInterrupted && !r.ChildStillRunning && r.Worker == ""
	}
	for _, id := range []string{"b3", mid, leaf} {
		row := jetruntest.WaitRow(t, b.store, id, 30*time.Second, stopped)
		if row.Reason != events.ReasonBudgetExceeded || row.Overrun == nil || row.Overrun.Owner != "b3" ||
			row.Overrun.Budget != "tokens" || row.Overrun.Limit != 1000 || row.Overrun.Used <= row.Overrun.Limit {
			t.Fatalf("%s: reason %q overrun %+v error %q", id, row.Reason, row.Overrun, row.Error)
		}
	}
	top := jetruntest.WaitRow(t, b.store, "b3", 30*time.Second, func(r *model.Row) bool {
		return !r.Delivered[events.StatusInterrupted].IsZero()
	})
	if top.TreeUsage == nil || top.TreeUsage.Tokens() <= 1000 {
		t.Fatalf("tree usage %+v", top.TreeUsage)
	}
	mu.Lock()
	got := append([]events.Status(nil), heard...)
	mu.Unlock()
	if len(got) != 1 || got[0] != events.StatusInterrupted {
		t.Fatalf("finish handler heard %v, want [interrupted] once", got)
	}
}

// Twenty children race for the last tokens of their root's budget: the
// tree overshoots by at most one report per child.
func TestTreeBudgetOvershootBound(t *testing.T) {
	t.Parallel()
	const (
		children = 20
		report   = 50
		budget   = 2000
	)
	start := make(chan struct{}) // every child started: they race from here
	b, _ := setup(t, worker.Config{Concurrency: children + 2}, map[string]worker.Handler{
		"racer": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			select {
			case <-start:
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
			return worker.Result{}, spendLoop(ctx, run, report)
		}),
		"fanout": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var kids []*worker.Child
			for i := range children {
				k, err := run.Spawn(ctx, worker.ChildRequest{AgentType: "racer", CallID: fmt.Sprint("r", i), Input: i})
				if err != nil {
					return worker.Result{}, err
				}
				kids = append(kids, k)
			}
			close(start)
			for _, k := range kids {
				if _, err := k.Await(ctx); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{}, nil
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "fanout", RunID: "race", Input: 1,
		Budget: &events.TreeBudget{Tokens: budget}}); err != nil {
		t.Fatal(err)
	}
	settled := func(r *model.Row) bool { return r.Status == events.StatusInterrupted && r.Worker == "" }
	for i := range children {
		row := jetruntest.WaitRow(t, b.store, parent.RunID("race", fmt.Sprint("r", i)), 60*time.Second, settled)
		if row.Reason != events.ReasonBudgetExceeded {
			t.Fatalf("child %d: reason %q", i, row.Reason)
		}
	}
	top := jetruntest.WaitRow(t, b.store, "race", 60*time.Second, settled)
	var sum int64
	for i := range children {
		row, _, err := b.store.Get(ctx, parent.RunID("race", fmt.Sprint("r", i)))
		if err != nil {
			t.Fatal(err)
		}
		if row.Usage != nil {
			sum += row.Usage.Tokens()
		}
	}
	used := top.TreeUsage.Tokens()
	if used <= budget || used > budget+children*report {
		t.Fatalf("tree used %d tokens with a budget of %d; want (%d, %d]", used, budget, budget, budget+children*report)
	}
	if sum != used {
		t.Fatalf("children's rows sum to %d tokens, the tree to %d", sum, used)
	}
	// The overrun says what the tree had spent when the report that
	// crossed the budget stopped it; the tree totals, what it spent in
	// the end (the reports already on their way included).
	if o := top.Overrun; o == nil || o.Limit != budget || o.Used <= budget || o.Used > budget+report || o.Used > used {
		t.Fatalf("overrun %+v; want used in (%d, %d], at most the tree's %d", top.Overrun, budget, budget+report, used)
	}
	t.Logf("budget %d, used %d (%d when stopped): overshoot %d (bound %d)", budget, used, top.Overrun.Used, used-budget, children*report)
}

// A runs budget refuses the child that would exceed it, with
// ErrBudgetExceeded to the handler that starts it.
func TestTreeBudgetRunsRefusesChild(t *testing.T) {
	t.Parallel()
	got := make(chan error, 1)
	b, _ := setup(t, worker.Config{Concurrency: 4}, map[string]worker.Handler{
		"noop": worker.HandlerFunc(func(context.Context, *worker.Run) (worker.Result, error) { return worker.Result{}, nil }),
		"three": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var err error
			for i := range 3 {
				if _, err = run.RunChild(ctx, worker.ChildRequest{AgentType: "noop", CallID: fmt.Sprint("n", i), Input: i}); err != nil {
					break
				}
			}
			got <- err
			return worker.Result{Summary: "done"}, nil
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, parent.Request{AgentType: "three", RunID: "runs2", Input: json.RawMessage(`1`),
		Budget: &events.TreeBudget{Runs: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, worker.ErrBudgetExceeded) {
		t.Fatalf("third child: %v, want ErrBudgetExceeded", err)
	}
	if _, _, err := b.store.Get(ctx, parent.RunID("runs2", "n2")); err == nil {
		t.Fatal("the refused child has a row")
	}
}

// A nested run dispatched by a plain publish (naming only its parent)
// draws from its tree's budget too: its first report reads its parent's
// row to learn the tree.
func TestPlainPublishedChildDrawsFromItsRootsBudget(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{Concurrency: 3}, map[string]worker.Handler{
		"idle": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		}),
		"pay": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, spendLoop(ctx, run, 40)
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "idle", RunID: "pp-root", Input: 1,
		Budget: &events.TreeBudget{Tokens: 100}}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, b.store, "pp-root", 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	publish(t, b.js, "jetrun.dispatch.pay", `{"runId":"pp-child","input":1,"parent":"pp-root","depth":1}`)
	stopped := func(r *model.Row) bool { return r.Status == events.StatusInterrupted && r.Worker == "" }
	for _, id := range []string{"pp-root", "pp-child"} {
		row := jetruntest.WaitRow(t, b.store, id, 30*time.Second, stopped)
		if row.Reason != events.ReasonBudgetExceeded || row.Overrun == nil || row.Overrun.Owner != "pp-root" {
			t.Fatalf("%s: %s %q overrun %+v", id, row.Status, row.Reason, row.Overrun)
		}
	}
}

// A nested run with a smaller budget of its own: past it, only its
// subtree stops; the root goes on, and its tree totals count the child's
// spend.
func TestChildBudgetStopsOnlyItsSubtree(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{Concurrency: 3}, map[string]worker.Handler{
		"pay": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, spendLoop(ctx, run, 40)
		}),
		"boss": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			_, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "pay", CallID: "sub", Input: 1,
				Budget: &events.TreeBudget{Tokens: 100}})
			var f *parent.Failure
			if !errors.As(err, &f) || f.Reason != events.ReasonBudgetExceeded {
				return worker.Result{}, fmt.Errorf("child: %v", err)
			}
			return worker.Result{Summary: "went on"}, nil
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Run(ctx, parent.Request{AgentType: "boss", RunID: "cb", Input: 1, Budget: &events.TreeBudget{Tokens: 100000}})
	if err != nil || res.Summary != "went on" {
		t.Fatalf("root: %+v %v", res, err)
	}
	sub := jetruntest.WaitRow(t, b.store, parent.RunID("cb", "sub"), 30*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusInterrupted && r.Worker == ""
	})
	if sub.Overrun == nil || sub.Overrun.Owner != sub.ID || sub.Overrun.Limit != 100 {
		t.Fatalf("child overrun %+v", sub.Overrun)
	}
	root := jetruntest.WaitRow(t, b.store, "cb", 10*time.Second, func(r *model.Row) bool {
		return r.TreeUsage != nil && sub.TreeUsage != nil && *r.TreeUsage == *sub.TreeUsage
	})
	if root.Overrun != nil || root.Status != events.StatusCompleted {
		t.Fatalf("root: %s overrun %+v", root.Status, root.Overrun)
	}
}

// The row never shows usage its tree's totals were not charged with: were
// the worker killed (kill -9) right after any write of the row, the tree
// would count at least what the run does. Reports arrive while the row
// syncs; every stored revision is checked.
func TestRowUsageNeverRunsAheadOfItsTree(t *testing.T) {
	t.Parallel()
	const reports = 1500
	b, _ := setup(t, worker.Config{Concurrency: 1, RowSyncInterval: 5 * time.Millisecond}, map[string]worker.Handler{
		"steady": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			pace := time.NewTicker(500 * time.Microsecond) // reports interleave with the syncs
			defer pace.Stop()
			for range reports {
				if err := run.Usage(ctx, worker.Usage{InputTokens: 1}); err != nil {
					return worker.Result{}, err
				}
				select {
				case <-pace.C:
				case <-ctx.Done():
					return worker.Result{}, ctx.Err()
				}
			}
			return worker.Result{}, nil
		}),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := b.js.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	watch, err := kv.Watch(ctx, "u-steady")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	if _, err := newClient(t, b).Dispatch(ctx, parent.Request{AgentType: "steady", RunID: "u-steady", Input: 1}); err != nil {
		t.Fatal(err)
	}
	withUsage := 0
	for e := range watch.Updates() {
		if e == nil {
			continue
		}
		var row model.Row
		if err := json.Unmarshal(e.Value(), &row); err != nil {
			t.Fatal(err)
		}
		if row.Usage != nil {
			withUsage++
			if row.TreeUsage == nil || row.Usage.InputTokens > row.TreeUsage.InputTokens {
				t.Fatalf("revision %d shows usage %+v ahead of its tree's %+v", e.Revision(), row.Usage.UsageTotals, row.TreeUsage)
			}
		}
		if row.Status.Final() {
			if row.Status != events.StatusCompleted || row.Usage == nil || row.Usage.InputTokens != reports {
				t.Fatalf("final row: %s, usage %+v; want completed with %d tokens", row.Status, row.Usage, reports)
			}
			break
		}
	}
	if withUsage < 20 {
		t.Fatalf("%d revisions showed usage; the test wants the row synced while reports arrive", withUsage)
	}
	t.Logf("%d revisions with usage checked", withUsage)
}
