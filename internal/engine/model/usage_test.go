package model_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// charge applies Charged with a fresh mark and returns the overrun it
// crossed (nil: within budget, or over already).
func charge(t *testing.T, r *model.Row, d jetruntype.UsageTotals) *jetruntype.Overrun {
	t.Helper()
	was := r.Overrun
	mark := model.ChargeMark{Run: "c", Attempt: 1, Seq: uint64(len(r.ChargeMarks)) + 1}
	if len(r.ChargeMarks) > 0 {
		mark.Seq = r.ChargeMarks[len(r.ChargeMarks)-1].Seq + 1
	}
	must(t, r, time.Now(), model.Charged{Mark: mark, Delta: d})
	if was == nil {
		return r.Overrun
	}
	return nil
}

func TestChargeCrossesABudgetOnce(t *testing.T) {
	r := &model.Row{ID: "root", Budget: &events.TreeBudget{Tokens: 100, CostMicros: 1000}}
	if o := charge(t, r, jetruntype.UsageTotals{InputTokens: 60, OutputTokens: 40}); o != nil {
		t.Fatalf("at the budget: %v", o)
	}
	o := charge(t, r, jetruntype.UsageTotals{OutputTokens: 30})
	if o == nil || o.Budget != "tokens" || o.Limit != 100 || o.Used != 130 || r.Overrun == nil {
		t.Fatalf("past the budget: %+v", o)
	}
	if again := charge(t, r, jetruntype.UsageTotals{CostMicros: 5000}); again != nil || r.Overrun.Budget != "tokens" {
		t.Fatalf("a tree stopped already is crossed again: %v", again)
	}
	if got := *r.TreeUsage; got != (jetruntype.UsageTotals{InputTokens: 60, OutputTokens: 70, CostMicros: 5000}) {
		t.Fatalf("tree usage %+v: every charge counts", got)
	}
	cost := &model.Row{ID: "c", Budget: &events.TreeBudget{CostMicros: 10}}
	if o := charge(t, cost, jetruntype.UsageTotals{InputTokens: 1 << 40, CostMicros: 11}); o == nil || o.Budget != "costMicros" {
		t.Fatalf("cost budget: %v", o)
	}
}

func TestRunCountedRefusesPastTheRunsBudget(t *testing.T) {
	r := &model.Row{ID: "root", Budget: &events.TreeBudget{Runs: 2}}
	for range 2 {
		must(t, r, time.Now(), model.RunCounted{})
	}
	var over *model.OverrunError
	if err := model.Apply(r, model.RunCounted{}, time.Now()); !errors.As(err, &over) ||
		over.Overrun.Budget != "runs" || over.Overrun.Used != 3 || r.TreeRuns != 2 {
		t.Fatalf("third run: %v, tree runs %d", err, r.TreeRuns)
	}
}

func TestBudgetStopped(t *testing.T) {
	o := jetruntype.Overrun{Owner: "root", Budget: "tokens", Limit: 10, Used: 12}
	now := time.Now()
	running := &model.Row{ID: "a", Status: events.StatusRunning, Worker: "w", Attempt: 1,
		Detached: &events.Detached{OnFinish: "h"}}
	must(t, running, now, model.BudgetStopped{Overrun: o, Held: true})
	if running.Status != events.StatusInterrupted || running.Reason != events.ReasonBudgetExceeded ||
		!running.ChildStillRunning || !running.CancelRequested || running.Overrun == nil || running.Finishes[events.StatusInterrupted] == nil {
		t.Fatalf("running run: %+v", running)
	}
	if err := model.Apply(running, model.BudgetStopped{Overrun: o, Held: true}, now); !errors.Is(err, model.ErrNoChange) {
		t.Fatalf("stopped twice: %v", err)
	}
	starting := &model.Row{ID: "b", Status: events.StatusStarting}
	if must(t, starting, now, model.BudgetStopped{Overrun: o}); starting.ChildStillRunning || starting.CancelRequested {
		t.Fatalf("starting run: %+v", starting)
	}
	done := &model.Row{ID: "c", Status: events.StatusCompleted}
	if err := model.Apply(done, model.BudgetStopped{Overrun: o}, now); !errors.Is(err, model.ErrNoChange) {
		t.Fatalf("completed run: %v", err)
	}
}

func TestChargesAndChildTree(t *testing.T) {
	root := &model.Row{ID: "root", Budget: &events.TreeBudget{Tokens: 1}}
	mid := &model.Row{ID: "mid", Parent: "root"}
	mid.Root, mid.BudgetFrom = root.ChildTree()
	mid.Budget = &events.TreeBudget{Tokens: 1}
	leaf := &model.Row{ID: "leaf", Parent: "mid"}
	leaf.Root, leaf.BudgetFrom = mid.ChildTree()
	if got := leaf.Charges(); len(got) != 2 || got[0] != "root" || got[1] != "mid" || !leaf.Budgeted() {
		t.Fatalf("leaf charges %v", got)
	}
	if got := mid.Charges(); len(got) != 2 || got[0] != "root" || got[1] != "mid" {
		t.Fatalf("mid charges %v", got)
	}
	plain := &model.Row{ID: "p"}
	if got := plain.Charges(); len(got) != 1 || got[0] != "p" || plain.Budgeted() {
		t.Fatalf("top-level charges %v", got)
	}
}

func TestUsageKeepsABoundedNumberOfModels(t *testing.T) {
	var u jetruntype.Usage
	for i := range events.MaxUsageModels + 5 {
		model.AddReport(&u, events.UsageReport{InputTokens: 1, Model: fmt.Sprint("m", i)})
	}
	model.AddReport(&u, events.UsageReport{InputTokens: 1, Model: "m0"})
	if len(u.Models) != events.MaxUsageModels || u.InputTokens != events.MaxUsageModels+6 || u.Models["m0"].InputTokens != 2 {
		t.Fatalf("models %d, totals %+v", len(u.Models), u.UsageTotals)
	}
}

func TestMinusUsageNeverGoesBelowZero(t *testing.T) {
	u := jetruntype.Usage{UsageTotals: jetruntype.UsageTotals{InputTokens: 50, OutputTokens: 10, CostMicros: 5},
		Models: map[string]jetruntype.UsageTotals{"a": {InputTokens: 30, OutputTokens: 10}, "b": {InputTokens: 20, CostMicros: 5}}}
	v := jetruntype.Usage{UsageTotals: jetruntype.UsageTotals{InputTokens: 20, OutputTokens: 15},
		Models: map[string]jetruntype.UsageTotals{"a": {InputTokens: 20, OutputTokens: 15}}}
	got := model.MinusUsage(u, v)
	want := jetruntype.UsageTotals{InputTokens: 30, CostMicros: 5}
	if got.UsageTotals != want || len(got.Models) != 2 || got.Models["a"] != (jetruntype.UsageTotals{InputTokens: 10}) ||
		got.Models["b"] != u.Models["b"] {
		t.Fatalf("u - v = %+v", got)
	}
	if d := model.MinusUsage(v, v); !model.IsZeroUsage(d) || d.Models != nil {
		t.Fatalf("v - v = %+v", d)
	}
}

// A charge sent again after its answer was lost (the same mark) adds
// nothing; the attempt's next charge adds again; a later attempt of the
// same run starts its sequence afresh and drops the earlier attempt's
// mark; past MaxChargeMarks attempts the least recently charged mark goes.
func TestChargeOnceTakesAChargeOnce(t *testing.T) {
	r := &model.Row{ID: "root", Budget: &events.TreeBudget{Tokens: 100}}
	ten := jetruntype.UsageTotals{InputTokens: 10}
	charge := func(run string, attempt int, seq uint64, d jetruntype.UsageTotals) bool {
		ev := model.Charged{Mark: model.ChargeMark{Run: run, Attempt: attempt, Seq: seq}, Delta: d}
		return errors.Is(model.Apply(r, ev, time.Now()), model.ErrNoChange)
	}
	for i, c := range []struct {
		run          string
		attempt      int
		seq          uint64
		wantDup      bool
		wantTokens   int64
		wantMarksFor int
	}{
		{"kid", 1, 1, false, 10, 1},
		{"kid", 1, 1, true, 10, 1}, // sent again: its answer was lost
		{"kid", 1, 2, false, 20, 1},
		{"kid", 1, 1, true, 20, 1}, // an older one: landed before the second
		{"other", 1, 1, false, 30, 1},
		{"kid", 2, 1, false, 40, 1}, // a takeover: attempt 1's mark goes
		{"kid", 2, 1, true, 40, 1},
	} {
		if dup := charge(c.run, c.attempt, c.seq, ten); dup != c.wantDup {
			t.Fatalf("charge %d (%s/%d/%d): dup %v, want %v", i, c.run, c.attempt, c.seq, dup, c.wantDup)
		}
		if got := r.TreeUsage.Tokens(); got != c.wantTokens {
			t.Fatalf("charge %d: tree tokens %d, want %d", i, got, c.wantTokens)
		}
		n := 0
		for _, m := range r.ChargeMarks {
			if m.Run == c.run {
				n++
			}
		}
		if n != c.wantMarksFor {
			t.Fatalf("charge %d: %d marks of %s, want %d: %v", i, n, c.run, c.wantMarksFor, r.ChargeMarks)
		}
	}
	for i := range model.MaxChargeMarks {
		charge(fmt.Sprintf("many-%d", i), 1, 1, jetruntype.UsageTotals{})
	}
	if len(r.ChargeMarks) != model.MaxChargeMarks || r.ChargeMarks[0].Run != "many-0" {
		t.Fatalf("%d marks, first %v; want the last %d", len(r.ChargeMarks), r.ChargeMarks[0], model.MaxChargeMarks)
	}
	c := r.Clone()
	c.ChargeMarks[0].Seq = 99
	if r.ChargeMarks[0].Seq == 99 {
		t.Fatal("a clone shares its marks with the row")
	}
}

// StepsCounted adds what stored steps spent beyond stepUsage to the
// run's usage, once, and to its own tree totals only at the top of a tree
// without a budget.
func TestCountStoredSteps(t *testing.T) {
	step := jetruntype.Usage{UsageTotals: jetruntype.UsageTotals{InputTokens: 120, OutputTokens: 30, CostMicros: 810},
		Models: map[string]jetruntype.UsageTotals{"m": {InputTokens: 120, OutputTokens: 30, CostMicros: 810}}}
	two := model.PlusUsage(step, step)
	for _, c := range []struct {
		name     string
		row      model.Row
		wantTree int64
	}{
		{"top without a budget", model.Row{ID: "a"}, 150},
		{"top with a budget", model.Row{ID: "b", Budget: &events.TreeBudget{Tokens: 10}}, 0},
		{"nested", model.Row{ID: "c", Parent: "p", Root: "p"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.row
			r.Usage, r.StepUsage = model.CloneUsage(&step), model.CloneUsage(&step) // one step counted
			r.Usage.InputTokens += 5                                                // a report outside steps
			if err := model.Apply(&r, model.StepsCounted{Stored: two}, time.Now()); err != nil {
				t.Fatalf("nothing counted: %v", err)
			}
			if err := model.Apply(&r, model.StepsCounted{Stored: two}, time.Now()); !errors.Is(err, model.ErrNoChange) {
				t.Fatalf("counted twice: %v", err)
			}
			if got, want := r.Usage.UsageTotals, two.UsageTotals.Add(jetruntype.UsageTotals{InputTokens: 5}); got != want {
				t.Fatalf("usage %+v, want %+v", got, want)
			}
			if r.StepUsage.UsageTotals != two.UsageTotals || r.Usage.Models["m"] != two.Models["m"] {
				t.Fatalf("stepUsage %+v, usage per model %v", r.StepUsage, r.Usage.Models)
			}
			var tree int64
			if r.TreeUsage != nil {
				tree = r.TreeUsage.Tokens()
			}
			if tree != c.wantTree {
				t.Fatalf("tree tokens %d, want %d", tree, c.wantTree)
			}
		})
	}
}
