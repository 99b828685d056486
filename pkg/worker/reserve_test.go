package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// reserveLoop reserves tokens, then reports them, per tick, until a
// reservation is refused (or its context ends), and returns that error.
func reserveLoop(ctx context.Context, run *worker.Run, tokens int64, refused *atomic.Int64) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := run.Reserve(ctx, worker.Usage{InputTokens: tokens}); err != nil {
			if errors.Is(err, worker.ErrBudgetExceeded) {
				refused.Add(1)
			}
			return err
		}
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

// The case of issue 38: twenty live runs report 100 tokens every few
// milliseconds against a tree budget of 2,000. Without reservations the
// tree overshoots by up to one report per run (TestTreeBudgetOvershootBound);
// with a reservation before each report it ends within 5 % of its budget,
// each run stopped by a refused reservation, and nothing stays held. The
// runs on one worker, then spread over three (7 slots each: every worker
// holds some), whose reservations race for the budget's row.
func TestReserveBoundsTreeOvershoot(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			t.Parallel()
			reserveRace(t, workers)
		})
	}
}

func reserveRace(t *testing.T, workers int) {
	const (
		children = 20
		report   = 100
		budget   = 2000
	)
	var refused atomic.Int64
	start := make(chan struct{})
	concurrency := children + 2
	if workers > 1 {
		concurrency = (children + workers) / workers // 20 runs and the fanout: 7 each for 3
	}
	handlers := map[string]worker.Handler{
		"reserver": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			select {
			case <-start:
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
			return worker.Result{}, reserveLoop(ctx, run, report, &refused)
		}),
		"fanout": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var kids []*worker.Child
			for i := range children {
				k, err := run.Spawn(ctx, worker.ChildRequest{AgentType: "reserver", CallID: fmt.Sprint("r", i), Input: i})
				if err != nil {
					return worker.Result{}, err
				}
				kids = append(kids, k)
			}
			close(start)
			for _, k := range kids {
				_, _ = k.Await(ctx) // each ends interrupted: its reservation was refused
			}
			return worker.Result{Output: "done"}, ctx.Err()
		}),
	}
	b, _ := setup(t, worker.Config{Concurrency: concurrency}, handlers)
	for range workers - 1 {
		startWorker(t, b.nc, worker.Config{Concurrency: concurrency}, handlers)
	}
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "fanout", RunID: "rrace", Input: 1,
		Budget: &events.TreeBudget{Tokens: budget}}); err != nil {
		t.Fatal(err)
	}
	for i := range children {
		row := jetruntest.WaitRow(t, b.store, parent.RunID("rrace", fmt.Sprint("r", i)), 60*time.Second, func(r *model.Row) bool {
			return r.Status.Terminal() && r.Worker == ""
		})
		if row.Status != events.StatusInterrupted || row.Reason != events.ReasonBudgetExceeded {
			t.Fatalf("child %d: %s, reason %q (%s); want interrupted, budget-exceeded", i, row.Status, row.Reason, row.Error)
		}
	}
	top := jetruntest.WaitRow(t, b.store, "rrace", 60*time.Second, func(r *model.Row) bool { return r.Status == events.StatusCompleted })
	used := top.TreeUsage.Tokens()
	if lo, hi := int64(budget*95/100), int64(budget*105/100); used < lo || used > hi {
		t.Fatalf("tree used %d tokens with a budget of %d; want within 5%% [%d, %d]", used, budget, lo, hi)
	}
	if top.Overrun != nil {
		t.Fatalf("the tree was stopped for its budget (%s); reservations should have kept it within", top.Overrun)
	}
	if len(top.Holds) != 0 {
		t.Fatalf("the budget still holds %+v after every run ended", top.Holds)
	}
	if n := refused.Load(); n != children {
		t.Fatalf("%d reservations refused; want one per run (%d)", n, children)
	}
	t.Logf("budget %d, used %d with reservations: overshoot %d (%d live runs on %d workers, %d tokens a report)", budget, used, used-budget, children, workers, report)
}

// A reservation holds against the budget until a report settles it (the
// real spend replaces it), Release gives it back, or its step or attempt
// ends; one that does not fit is refused with ErrBudgetExceeded and
// charges nothing; a bad amount is an error and reserves nothing.
func TestReserveHoldsSettlesAndReleases(t *testing.T) {
	t.Parallel()
	type seen struct {
		tree  int64
		holds int
	}
	var b *bundle
	look := func(ctx context.Context) seen {
		row, _, err := b.store.Get(ctx, "hold")
		if err != nil {
			t.Error(err)
			return seen{}
		}
		s := seen{holds: len(row.Holds)}
		if row.TreeUsage != nil {
			s.tree = row.TreeUsage.Tokens()
		}
		return s
	}
	type step struct {
		what string
		got  seen
		err  error
	}
	steps := make(chan step, 16)
	b, _ = setup(t, worker.Config{Concurrency: 2}, map[string]worker.Handler{
		"holder": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			note := func(what string, err error) { steps <- step{what, look(ctx), err} }
			a, err := run.Reserve(ctx, worker.Usage{InputTokens: 600})
			note("reserve 600", err)
			_, err = run.Reserve(ctx, worker.Usage{InputTokens: 300, OutputTokens: 200})
			note("reserve 500 more", err)
			a.Release()
			a.Release() // idempotent
			note("release the 600", nil)
			_, err = run.Reserve(ctx, worker.Usage{InputTokens: 1000})
			note("reserve 1000", err)
			note("report 300", run.Usage(ctx, worker.Usage{InputTokens: 300}))
			_, err = run.Step(ctx, "think", func(ctx context.Context) (any, error) {
				_, err := run.Reserve(ctx, worker.Usage{InputTokens: 500})
				note("reserve 500 in a step", err)
				return "thought", nil // no report: the step's end releases it
			})
			note("after the step", err)
			_, err = run.Reserve(ctx, worker.Usage{InputTokens: 700})
			note("reserve 700", err)
			_, err = run.Reserve(ctx, worker.Usage{InputTokens: 1})
			note("reserve 1 more", err)
			for _, bad := range []worker.Usage{{InputTokens: -5}, {}, {OutputTokens: events.MaxReserveAmount + 1}} {
				_, err = run.Reserve(ctx, bad)
				note(fmt.Sprintf("reserve %+v", bad), err)
			}
			close(steps)
			return worker.Result{Output: "ok"}, nil // the 700 is still held: the end releases it
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "holder", RunID: "hold", Input: 1,
		Budget: &events.TreeBudget{Tokens: 1000}}); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		what    string
		got     seen
		refused bool   // ErrBudgetExceeded
		bad     string // a bad-input error containing this
	}{
		{what: "reserve 600", got: seen{0, 1}},
		{what: "reserve 500 more", got: seen{0, 1}, refused: true},
		{what: "release the 600", got: seen{0, 0}},
		{what: "reserve 1000", got: seen{0, 1}},
		{what: "report 300", got: seen{300, 0}},
		{what: "reserve 500 in a step", got: seen{300, 1}},
		{what: "after the step", got: seen{300, 0}},
		{what: "reserve 700", got: seen{300, 1}},
		{what: "reserve 1 more", got: seen{300, 1}, refused: true},
		{what: "reserve {InputTokens:-5 OutputTokens:0 CostMicros:0 Model: AnsweredAtMs:0}", got: seen{300, 1}, bad: "must not be negative"},
		{what: "reserve {InputTokens:0 OutputTokens:0 CostMicros:0 Model: AnsweredAtMs:0}", got: seen{300, 1}, bad: "is empty"},
		{what: fmt.Sprintf("reserve {InputTokens:0 OutputTokens:%d CostMicros:0 Model: AnsweredAtMs:0}", events.MaxReserveAmount+1), got: seen{300, 1}, bad: "the most one reservation may hold"},
	}
	i := 0
	for s := range steps {
		if i >= len(want) {
			t.Fatalf("unexpected step %q", s.what)
		}
		w := want[i]
		i++
		if s.what != w.what || s.got != w.got {
			t.Errorf("%s: tree %d, %d holds; want %s: tree %d, %d holds", s.what, s.got.tree, s.got.holds, w.what, w.got.tree, w.got.holds)
		}
		switch {
		case w.refused:
			if !errors.Is(s.err, worker.ErrBudgetExceeded) || !strings.Contains(fmt.Sprint(s.err), "tokens") {
				t.Errorf("%s: %v; want ErrBudgetExceeded naming the tokens budget", s.what, s.err)
			}
		case w.bad != "":
			if s.err == nil || errors.Is(s.err, worker.ErrBudgetExceeded) || !strings.Contains(s.err.Error(), w.bad) {
				t.Errorf("%s: %v; want an error saying %q", s.what, s.err, w.bad)
			}
		case s.err != nil:
			t.Errorf("%s: %v", s.what, s.err)
		}
	}
	if i != len(want) {
		t.Fatalf("%d steps; want %d", i, len(want))
	}
	row := jetruntest.WaitRow(t, b.store, "hold", 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusCompleted })
	if len(row.Holds) != 0 || row.TreeUsage.Tokens() != 300 {
		t.Fatalf("after the run: tree %d tokens, holds %+v; want 300 and none held", row.TreeUsage.Tokens(), row.Holds)
	}
}

// Runs that reserve less than they then report still stop their tree
// when their reports take it past its budget (the reports that settle
// the reservations are charged as any report), and each ends interrupted,
// budget-exceeded. Reports of 400 tokens move the tree 400 at a time:
// the one that crosses 1,000 takes it to 1,200.
func TestReserveUnderestimateStillStopsTheTree(t *testing.T) {
	t.Parallel()
	const (
		children = 5
		budget   = 1000
	)
	start := make(chan struct{})
	b, _ := setup(t, worker.Config{Concurrency: children + 2}, map[string]worker.Handler{
		"under": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-start
			for {
				if _, err := run.Reserve(ctx, worker.Usage{InputTokens: 10}); err != nil {
					return worker.Result{}, err
				}
				if err := run.Usage(ctx, worker.Usage{InputTokens: 400}); err != nil {
					return worker.Result{}, err
				}
			}
		}),
		"fanout": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var kids []*worker.Child
			for i := range children {
				k, err := run.Spawn(ctx, worker.ChildRequest{AgentType: "under", CallID: fmt.Sprint("u", i), Input: i})
				if err != nil {
					return worker.Result{}, err
				}
				kids = append(kids, k)
			}
			close(start)
			for _, k := range kids {
				_, _ = k.Await(ctx)
			}
			return worker.Result{}, ctx.Err()
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "fanout", RunID: "under", Input: 1,
		Budget: &events.TreeBudget{Tokens: budget}}); err != nil {
		t.Fatal(err)
	}
	for i := range children {
		row := jetruntest.WaitRow(t, b.store, parent.RunID("under", fmt.Sprint("u", i)), 60*time.Second, func(r *model.Row) bool {
			return r.Status.Terminal() && r.Worker == ""
		})
		if row.Status != events.StatusInterrupted || row.Reason != events.ReasonBudgetExceeded {
			t.Fatalf("child %d: %s, reason %q (%s)", i, row.Status, row.Reason, row.Error)
		}
	}
	top := jetruntest.WaitRow(t, b.store, "under", 60*time.Second, func(r *model.Row) bool {
		return r.Status.Terminal() && r.Worker == ""
	})
	if top.Overrun == nil || top.Overrun.Limit != budget || top.Overrun.Used != 1200 {
		t.Fatalf("overrun %+v; want the tree stopped at 1200 past %d", top.Overrun, budget)
	}
	if len(top.Holds) != 0 {
		t.Fatalf("holds %+v after every run ended; want none", top.Holds)
	}
}

// The server goes away while a handler reserves: Reserve waits through the
// outage (a fault is not a refusal) and holds once; the report after it
// settles it, and the run completes on its first attempt.
func TestReserveWaitsThroughAnOutage(t *testing.T) {
	t.Parallel()
	outage := natstest.RunOutage(t)
	nc := outage.Conn
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	halfway, resume := make(chan struct{}), make(chan struct{})
	var handlerErr error
	startWorker(t, nc, worker.Config{}, map[string]worker.Handler{
		"outage": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if _, err := run.Reserve(ctx, worker.Usage{InputTokens: 100}); err != nil {
				handlerErr = err
				return worker.Result{}, err
			}
			close(halfway)
			<-resume
			if _, err := run.Reserve(ctx, worker.Usage{InputTokens: 200}); err != nil { // during the outage
				handlerErr = err
				return worker.Result{}, err
			}
			if err := run.Usage(ctx, worker.Usage{InputTokens: 250}); err != nil {
				handlerErr = err
				return worker.Result{}, err
			}
			return worker.Result{Summary: "done"}, nil
		}),
	})
	publish(t, js, "jetrun.dispatch.outage", `{"runId":"ro","input":{},"budget":{"tokens":1000}}`)
	<-halfway
	outage.Stop()
	close(resume)
	natstest.Eventually(t, 60*time.Second, func() bool { return outage.FailedReconnects() >= 10 },
		"the connection did not try to reconnect")
	outage.Start()

	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "ro", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 1 || handlerErr != nil {
		t.Fatalf("run after the restart: %s attempt %d (%s), handler error %v", row.Status, row.Attempt, row.Error, handlerErr)
	}
	if row.TreeUsage == nil || row.TreeUsage.Tokens() != 250 || len(row.Holds) != 0 {
		t.Fatalf("tree usage %+v, holds %+v; want 250 spent, none held", row.TreeUsage, row.Holds)
	}
}

// A nested run with a budget of its own reserves against it and against
// every budget above it; a reservation its own budget refuses is taken
// back from the budgets above, and the run's end releases what it held.
func TestReserveHoldsOnEveryBudgetAbove(t *testing.T) {
	t.Parallel()
	type seen struct{ root, own int }
	got := make(chan seen, 4)
	errs := make(chan error, 4)
	var b *bundle
	holds := func(ctx context.Context, id string) int {
		row, _, err := b.store.Get(ctx, id)
		if err != nil {
			t.Error(err)
			return -1
		}
		return len(row.Holds)
	}
	b, _ = setup(t, worker.Config{Concurrency: 4}, map[string]worker.Handler{
		"kid": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for _, n := range []int64{200, 200} {
				_, err := run.Reserve(ctx, worker.Usage{InputTokens: n})
				errs <- err
				got <- seen{holds(ctx, "nest"), holds(ctx, run.ID())}
			}
			return worker.Result{Summary: "ok"}, nil
		}),
		"nest": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			_, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "kid", CallID: "k", Input: 1, Budget: &events.TreeBudget{Tokens: 300}})
			return worker.Result{Summary: "done"}, err
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, parent.Request{AgentType: "nest", RunID: "nest", Input: 1, Budget: &events.TreeBudget{Tokens: 1000}}); err != nil {
		t.Fatal(err)
	}
	if err, s := <-errs, <-got; err != nil || s != (seen{1, 1}) {
		t.Fatalf("first reservation: %v, holds %+v; want held on both budgets", err, s)
	}
	if err, s := <-errs, <-got; !errors.Is(err, worker.ErrBudgetExceeded) || !strings.Contains(err.Error(), "run "+parent.RunID("nest", "k")) || s != (seen{1, 1}) {
		t.Fatalf("second reservation: %v, holds %+v; want refused by the kid's own budget, nothing more held", err, s)
	}
	if s := (seen{holds(ctx, "nest"), holds(ctx, parent.RunID("nest", "k"))}); s != (seen{0, 0}) {
		t.Fatalf("after the runs: holds %+v; the kid's end releases what it held on both", s)
	}
}
