package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/budget"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// stepUsageOf adds up the usage stored with a run's steps.
func stepUsageOf(t *testing.T, evs []jetruntest.Event) (sum events.UsageTotals, steps int) {
	t.Helper()
	for _, ev := range evs {
		if st := ev.Step; st != nil && st.Usage != nil {
			sum = sum.Add(st.Usage.UsageTotals)
			steps++
		}
	}
	return sum, steps
}

func totalsOf(u *jetruntype.Usage) events.UsageTotals {
	if u == nil {
		return events.UsageTotals{}
	}
	return u.UsageTotals
}

func treeOf(r *model.Row) events.UsageTotals {
	if r.TreeUsage == nil {
		return events.UsageTotals{}
	}
	return *r.TreeUsage
}

// A Go worker is killed with -9 right after its runs stored four steps
// with usage each, before any row sync (the worker syncs rows every ten
// minutes here): the run taken over does not run those steps again, and
// still counts what they spent, once, on the run, on its tree and on the
// budget it draws from. Top-level runs with and without a budget, and
// nested runs (dispatched under a live parent) with and without one.
func TestKilledWorkerCountsStoredStepsUsageOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	worker := func(id string) *proc {
		p := start(t, "stepworker", map[string]string{"STEPWORKER_ROW_SYNC": "10m"}, e.url, id)
		p.waitLog("stepworker serving", 60*time.Second)
		return p
	}
	a := worker("su-a")

	per := events.UsageReport{InputTokens: 10, OutputTokens: 2, CostMicros: 3, Model: "m"}
	steps := []string{"one", "two", "three", "four", "five"}
	big := &events.TreeBudget{Tokens: 1_000_000}
	type spec struct {
		id, parent string
		budget     *events.TreeBudget
	}
	runs := []spec{
		{id: "su-top"}, {id: "su-topb", budget: big},
		{id: "su-par"}, {id: "su-kid", parent: "su-par"},
		{id: "su-parb", budget: big}, {id: "su-kidb", parent: "su-parb"},
	}
	dirs := make(map[string]string)
	for _, r := range runs {
		dir := t.TempDir()
		dirs[r.id] = dir
		touch(t, filepath.Join(dir, "five.hold")) // the worker is inside step five when it is killed
		_, err := e.client.Dispatch(context.Background(), parent.Request{AgentType: "stepper", RunID: r.id, Parent: r.parent,
			Budget: r.budget, Input: map[string]any{"dir": dir, "steps": steps, "usage": per}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		waitCounter(t, filepath.Join(dirs[r.id], "five"), 1) // four steps stored
	}
	before := make(map[string]*model.Row)
	for _, r := range runs {
		row, _, err := e.store.Get(context.Background(), r.id)
		if err != nil {
			t.Fatal(err)
		}
		before[r.id] = row
	}
	a.kill()

	worker("su-b")
	for _, r := range runs {
		touch(t, filepath.Join(dirs[r.id], "five.go"))
	}
	one := events.UsageTotals{InputTokens: per.InputTokens, OutputTokens: per.OutputTokens, CostMicros: per.CostMicros}
	all := events.UsageTotals{}
	for range steps {
		all = all.Add(one)
	}
	final := make(map[string]*model.Row)
	for _, r := range runs {
		row := jetruntest.WaitRow(t, e.store, r.id, 90*time.Second, jetruntest.Final)
		if row.Status != events.StatusCompleted || row.Attempt != 2 {
			t.Fatalf("%s: %s attempt %d (%s)", r.id, row.Status, row.Attempt, row.Error)
		}
		final[r.id] = row
		stored, n := stepUsageOf(t, waitFinalEvent(t, e.js, r.id))
		if n != len(steps) || stored != all {
			t.Fatalf("%s: %d stored steps with usage %+v; want %d, %+v", r.id, n, stored, len(steps), all)
		}
		t.Logf("%s: stored steps spent %d tokens; row before the kill %d, after the takeover %d (tree %d)",
			r.id, stored.Tokens(), totalsOf(before[r.id].Usage).Tokens(), totalsOf(row.Usage).Tokens(), treeOf(row).Tokens())
	}
	for _, r := range runs {
		// Read again once every run ended: a nested run charges the top of
		// its tree until its own end, which may come after the top's.
		row, _, err := e.store.Get(context.Background(), r.id)
		if err != nil {
			t.Fatal(err)
		}
		final[r.id] = row
		if got := totalsOf(row.Usage); got != all || row.Usage.Models["m"] != all {
			t.Errorf("%s: usage %+v; want the stored steps' %+v, once", r.id, row.Usage, all)
		}
		want := all // the top of a tree: its own, and its child's
		for _, k := range runs {
			if k.parent == r.id {
				want = want.Add(all)
			}
		}
		if r.parent == "" && treeOf(row) != want {
			t.Errorf("%s: tree usage %+v; want %+v", r.id, treeOf(row), want)
		}
		if r.parent != "" && row.TreeUsage != nil {
			t.Errorf("%s: a nested run without a budget has tree usage %+v", r.id, row.TreeUsage)
		}
	}
	var billed, spent int64
	for _, r := range runs {
		billed += totalsOf(final[r.id].Usage).Tokens()
		spent += all.Tokens()
	}
	t.Logf("figures: %d runs, tokens reported by stored steps %d, billed on the runs %d", len(runs), spent, billed)
}

// Python agents through the exec type store a step per model call, every
// 50 ms, the call's usage inside the step line or on a usage line right
// before it; their worker is killed with -9 mid-loop, within a row-sync
// interval of their last stored steps. The runs taken over bill exactly
// what their stored steps spent on the run, and on its tree when it has no
// budget. With a budget, a step's usage is charged to the tree as it is
// reported, before the step is stored: when the kill lands in between, the
// step's call is made again by the next attempt (the agent's ledger shows
// it twice) and the tree counts both calls, as they were both paid (see
// TestBudgetedTreeCountsACallTheKillMadeTwice). The tree total is then the
// stored steps' plus that one call.
func TestPythonKilledWorkerCountsStoredStepsUsageOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agents := map[string]string{"JETRUN_EXEC_AGENTS": "agent-py=" + python3(t) + " " + examples(t, "python", "agent.py")}
	a := e.childWorker(t, "pys-a", agents)
	type spec struct {
		id         string
		usageLines bool
		budget     *events.TreeBudget
	}
	runs := []spec{
		{id: "pys-in"}, {id: "pys-lines", usageLines: true},
		{id: "pys-inb", budget: &events.TreeBudget{Tokens: 1_000_000}},
		{id: "pys-linesb", usageLines: true, budget: &events.TreeBudget{Tokens: 1_000_000}},
	}
	const turns = 40
	ledgers := make(map[string]string)
	for _, r := range runs {
		ledgers[r.id] = filepath.Join(t.TempDir(), "ledger")
		_, err := e.client.Dispatch(context.Background(), parent.Request{AgentType: "agent-py", RunID: r.id, Budget: r.budget,
			Input: map[string]any{"question": "tides", "turns": turns, "delay": 0.05, "usageLines": r.usageLines, "ledger": ledgers[r.id]}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		natstest.Eventually(t, 60*time.Second, func() bool {
			return len(storedSteps(jetruntest.ReadEvents(t, e.js, r.id))) >= 4
		}, "%s did not store 4 steps", r.id)
	}
	a.kill()
	for _, r := range runs {
		row, _, err := e.store.Get(context.Background(), r.id)
		if err != nil {
			t.Fatal(err)
		}
		n := len(storedSteps(jetruntest.ReadEvents(t, e.js, r.id)))
		t.Logf("%s at the kill: %d steps stored, the row counts %d tokens", r.id, n, totalsOf(row.Usage).Tokens())
	}
	e.childWorker(t, "pys-b", agents)

	// What the agent's calls of the stored steps cost (agent.py): turn n
	// reads 40 + 30 × (n − 1) tokens and writes 12.
	var paid events.UsageTotals
	for n := range turns {
		paid = paid.Add(events.UsageTotals{InputTokens: int64(40 + 30*n), OutputTokens: 12})
	}
	var billed, spent, lost int64
	for _, r := range runs {
		row := jetruntest.WaitRow(t, e.store, r.id, 120*time.Second, jetruntest.Final)
		if row.Status != events.StatusCompleted || row.Attempt != 2 {
			t.Fatalf("%s: %s attempt %d (%s)", r.id, row.Status, row.Attempt, row.Error)
		}
		stored, n := stepUsageOf(t, waitFinalEvent(t, e.js, r.id))
		if n != turns || stored != paid {
			t.Errorf("%s: %d steps stored with usage %+v, want %d with what their calls cost, %+v", r.id, n, stored, turns, paid)
		}
		if got := totalsOf(row.Usage); got != stored || row.Usage.Models["sim-1"] != stored {
			t.Errorf("%s: usage %+v; want its stored steps' %+v, once", r.id, row.Usage, stored)
		}
		again := callMadeAgain(t, ledgers[r.id], turns)
		if tree := treeOf(row); tree != stored && (r.budget == nil || !within(model.SubTotals(tree, stored), again)) {
			t.Errorf("%s: tree usage %+v; want its stored steps' %+v (with a budget, plus at most the call made again, %+v)",
				r.id, row.TreeUsage, stored, again)
		}
		t.Logf("%s: the tree counts %d tokens beyond its stored steps' (a call made twice: %d tokens)",
			r.id, model.SubTotals(treeOf(row), stored).Tokens(), again.Tokens())
		billed += totalsOf(row.Usage).Tokens()
		spent += paid.Tokens()
		lost += max(paid.Tokens()-totalsOf(row.Usage).Tokens(), 0)
	}
	t.Logf("figures: %d runs, tokens their stored steps' calls cost %d, billed on the runs %d (%d short)", len(runs), spent, billed, lost)
}

// callMadeAgain is what the first call of agent.py's ledger at path that
// was made by two attempts cost (turn n reads 40 + 30 × (n − 1) tokens and
// writes 12): the call the first attempt made when its worker was killed,
// made again by the next. Zero when no call was made twice.
func callMadeAgain(t *testing.T, path string, turns int) events.UsageTotals {
	t.Helper()
	f := counterLines(t, path) // "think-<n> <attempt>" per call made
	made := make(map[string]int)
	for i := 0; i+1 < len(f); i += 2 {
		made[f[i]]++
	}
	for n := 1; n <= turns; n++ {
		if made[fmt.Sprintf("think-%d", n)] > 1 {
			return events.UsageTotals{InputTokens: int64(40 + 30*(n-1)), OutputTokens: 12}
		}
	}
	return events.UsageTotals{}
}

// within reports whether d counts no more than most, and nothing negative:
// a call's usage reported on several usage lines may be charged in part
// when the kill lands between them.
func within(d, most events.UsageTotals) bool {
	return d.InputTokens >= 0 && d.OutputTokens >= 0 && d.CostMicros >= 0 &&
		d.InputTokens <= most.InputTokens && d.OutputTokens <= most.OutputTokens && d.CostMicros <= most.CostMicros
}

// A Go worker is killed with -9 inside a step whose function reported its
// usage already (charged to the tree of a run with a budget, before the
// step is stored): the next attempt runs the step again, and its call is
// paid twice. The run counts its stored steps' usage, once; the tree of a
// run with a budget counts both calls of the step, as a budget bounds what
// was spent; the tree of a run without a budget is charged with the run's
// row write, which the kill lost, so it counts the stored steps' only.
func TestBudgetedTreeCountsACallTheKillMadeTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	worker := func(id string) *proc {
		p := start(t, "stepworker", map[string]string{"STEPWORKER_ROW_SYNC": "10m"}, e.url, id)
		p.waitLog("stepworker serving", 60*time.Second)
		return p
	}
	a := worker("kt-a")
	per := events.UsageReport{InputTokens: 10, OutputTokens: 2, CostMicros: 3, Model: "m"}
	one := events.UsageTotals{InputTokens: per.InputTokens, OutputTokens: per.OutputTokens, CostMicros: per.CostMicros}
	steps := []string{"one", "two", "three"}
	runs := map[string]*events.TreeBudget{"kt-top": nil, "kt-topb": {Tokens: 1_000_000}}
	dirs := make(map[string]string)
	for id, b := range runs {
		dir := t.TempDir()
		dirs[id] = dir
		touch(t, filepath.Join(dir, "two.hold")) // killed inside step two, after it reported its usage
		_, err := e.client.Dispatch(context.Background(), parent.Request{AgentType: "stepper", RunID: id, Budget: b,
			Input: map[string]any{"dir": dir, "steps": steps, "usage": per, "usageFirst": true}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for id := range runs {
		waitCounter(t, filepath.Join(dirs[id], "two"), 1) // its usage reported (and charged, with a budget)
	}
	a.kill()
	worker("kt-b")
	for id := range runs {
		touch(t, filepath.Join(dirs[id], "two.go"))
	}
	for id, b := range runs {
		row := jetruntest.WaitRow(t, e.store, id, 90*time.Second, jetruntest.Final)
		if row.Status != events.StatusCompleted || row.Attempt != 2 {
			t.Fatalf("%s: %s attempt %d (%s)", id, row.Status, row.Attempt, row.Error)
		}
		if got := counterLines(t, filepath.Join(dirs[id], "two")); !slices.Equal(got, []string{"1", "2"}) {
			t.Fatalf("%s: step two ran in attempts %v; want 1 and 2", id, got)
		}
		stored, n := stepUsageOf(t, waitFinalEvent(t, e.js, id))
		want := one.Add(one).Add(one)
		if n != len(steps) || stored != want || totalsOf(row.Usage) != want {
			t.Errorf("%s: %d stored steps with usage %+v, the run counts %+v; want %d, %+v", id, n, stored, row.Usage, len(steps), want)
		}
		wantTree := want
		if b != nil {
			wantTree = want.Add(one) // step two's call, made twice
		}
		if treeOf(row) != wantTree {
			t.Errorf("%s: tree usage %+v; want %+v", id, row.TreeUsage, wantTree)
		}
	}
}

// A Go worker is killed with -9 right after its runs stored four steps
// with usage each, before any row sync, and the runs then end without
// another attempt: stopped for their tree's budget (the top with its
// budget and a run nested under it, budget.Trees.Stop as a report past
// the budget does), cancelled (with and without a budget of their own:
// parent.Client.Cancel), given up by the reconciler past a detached run's
// absolute budget, or ended max-attempts by the next worker that finds the
// run's attempts used up. Whoever ends such a run counts what its stored
// steps spent: each run's usage is its stored steps', once, and each tree
// total counts them once.
func TestLostAttemptsStepsCountWhenTheRunEndsWithoutAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc, err := nats.Connect(e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rt := engine.From(jetruntest.OpenRuntime(t, nc, jetrun.Config{}))
	worker := func(id string, env map[string]string) *proc {
		p := start(t, "stepworker", env, e.url, id)
		p.waitLog("stepworker serving", 60*time.Second)
		return p
	}
	a := worker("ls-a", map[string]string{"STEPWORKER_ROW_SYNC": "10m"})

	per := events.UsageReport{InputTokens: 10, OutputTokens: 2, CostMicros: 3, Model: "m"}
	steps := []string{"one", "two", "three", "four", "five"}
	big := &events.TreeBudget{Tokens: 1_000_000}
	type spec struct {
		id, parent string
		budget     *events.TreeBudget
		detached   *events.Detached
	}
	runs := []spec{
		{id: "ls-stop", budget: big}, {id: "ls-kid", parent: "ls-stop"}, // stopped for ls-stop's budget
		{id: "ls-cancel"}, {id: "ls-cancelb", budget: big}, // cancelled
		{id: "ls-late", detached: &events.Detached{MaxBudgetMs: 1}}, // given up by the reconciler
		{id: "ls-max"}, // ended max-attempts
	}
	dirs := make(map[string]string)
	for _, r := range runs {
		dir := t.TempDir()
		dirs[r.id] = dir
		touch(t, filepath.Join(dir, "five.hold")) // the worker is inside step five when it is killed
		_, err := e.client.Dispatch(context.Background(), parent.Request{AgentType: "stepper", RunID: r.id, Parent: r.parent,
			Budget: r.budget, Detached: r.detached, Input: map[string]any{"dir": dir, "steps": steps, "usage": per}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		waitCounter(t, filepath.Join(dirs[r.id], "five"), 1) // four steps stored
	}
	a.kill()
	for _, r := range runs {
		natstest.Eventually(t, 30*time.Second, func() bool {
			row, _, err := e.store.Get(context.Background(), r.id)
			if err != nil {
				t.Fatal(err)
			}
			alive, err := e.store.Workers().HolderAlive(context.Background(), row)
			return err == nil && !alive
		}, "%s: its killed worker still counts as alive", r.id)
	}

	ctx := context.Background()
	trees := budget.New(rt, 8, slog.New(slog.DiscardHandler))
	if err := trees.Stop(ctx, jetruntype.Overrun{Owner: "ls-stop", Budget: "tokens", Limit: 1, Used: 2}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ls-cancel", "ls-cancelb"} {
		if _, err := e.client.Cancel(ctx, id, "enough"); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := reconcile.New(rt, reconcile.Config{Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Stop() })
	worker("ls-b", map[string]string{"STEPWORKER_MAX_ATTEMPTS": "1"})

	ended := map[string]events.Status{"ls-stop": events.StatusInterrupted, "ls-kid": events.StatusInterrupted,
		"ls-cancel": events.StatusAborted, "ls-cancelb": events.StatusAborted, "ls-late": events.StatusInterrupted,
		"ls-max": events.StatusError}
	one := events.UsageTotals{InputTokens: per.InputTokens, OutputTokens: per.OutputTokens, CostMicros: per.CostMicros}
	four := one.Add(one).Add(one).Add(one)
	final := make(map[string]*model.Row)
	for _, r := range runs {
		// Whoever ends a run writes its row, then announces it: once its
		// status event is stored, the row is as its ender left it.
		var evs []jetruntest.Event
		natstest.Eventually(t, 60*time.Second, func() bool {
			evs = jetruntest.ReadEvents(t, e.js, r.id)
			return slices.Contains(jetruntest.Statuses(evs), ended[r.id])
		}, "%s did not end %s", r.id, ended[r.id])
		row, _, err := e.store.Get(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		final[r.id] = row
		stored, n := stepUsageOf(t, evs)
		if n != 4 || stored != four {
			t.Fatalf("%s: %d stored steps with usage %+v; want 4, %+v", r.id, n, stored, four)
		}
		t.Logf("%s: %s (%s), attempt %d: usage %d tokens of its stored steps' %d", r.id, row.Status, row.Reason, row.Attempt,
			totalsOf(row.Usage).Tokens(), stored.Tokens())
	}
	for _, r := range runs {
		row := final[r.id]
		if got := totalsOf(row.Usage); got != four || row.Usage.Models["m"] != four || totalsOf(row.StepUsage) != four {
			t.Errorf("%s: usage %+v, stepUsage %+v; want its stored steps' %+v, once", r.id, row.Usage, row.StepUsage, four)
		}
		want := four // the top of a tree: its own, and its child's
		for _, k := range runs {
			if k.parent == r.id {
				want = want.Add(four)
			}
		}
		if r.parent == "" && treeOf(row) != want {
			t.Errorf("%s: tree usage %+v; want %+v", r.id, treeOf(row), want)
		}
	}
}
