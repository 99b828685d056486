package jetruncli_test

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// jetrun get shows a run's usage, per model, and its tree's budget.
func TestGetShowsUsageAndBudget(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("paid", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, run.Usage(ctx, worker.Usage{InputTokens: 7, OutputTokens: 3, CostMicros: 42, Model: "tiny"})
		})
	})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Run(ctx, parent.Request{AgentType: "paid", RunID: "g1", Input: 1,
		Budget: &events.TreeBudget{Tokens: 1000, Runs: 5}}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())
	var out, errw bytes.Buffer
	if code := jetruncli.Main(ctx, []string{"get", "g1"}, nil, &out, &errw); code != jetruncli.ExitOK {
		t.Fatalf("jetrun get: exit %d: %s", code, errw.String())
	}
	for _, want := range []string{
		"usage       7 in + 3 out tokens, 42 micros (tiny: 7 in + 3 out tokens, 42 micros)",
		"tree usage  7 in + 3 out tokens, 42 micros",
		"budget      tokens 1000, runs 5",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("jetrun get lacks %q:\n%s", want, out.String())
		}
	}
}

// jetrun get prints the run's tree with usage: each run with its status,
// duration, tokens and cost, its steps under it, and the tree's totals.
func TestGetShowsTheTreeWithUsageAndSteps(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	work := func(ctx context.Context, run *worker.Run, step string, tokens int64) error {
		if _, err := run.Step(ctx, step, func(context.Context) (any, error) { return "done", nil }); err != nil {
			return err
		}
		return run.Usage(ctx, worker.Usage{InputTokens: tokens, OutputTokens: 1, CostMicros: 10 * tokens})
	}
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("planner", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if err := work(ctx, run, "plan", 100); err != nil {
				return worker.Result{}, err
			}
			_, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "leaf", CallID: "c1", Input: 1})
			return worker.Result{}, err
		})
		w.HandleFunc("leaf", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, work(ctx, run, "search", 10)
		})
	})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Run(ctx, parent.Request{AgentType: "planner", RunID: "p1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	child := parent.RunID("p1", "c1")
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())
	var out, errw bytes.Buffer
	if code := jetruncli.Main(ctx, []string{"get", "p1"}, nil, &out, &errw); code != jetruncli.ExitOK {
		t.Fatalf("jetrun get: exit %d: %s", code, errw.String())
	}
	text := out.String()
	for _, re := range []string{
		`(?m)^duration +\d+(\.\d+)?[µm]?s$`,
		`(?m)^usage +100 in \+ 1 out tokens, 1000 micros$`,
		`(?m)^steps\n  .*  plan  6 B  .*attempt 1$`,
		`(?m)^children\n  c1\n    ` + regexp.QuoteMeta(child) + `  leaf  completed  \d+(\.\d+)?[µm]?s  10 in \+ 1 out tokens, 100 micros\n` +
			`        step search  6 B  .*attempt 1$`,
		`(?m)^tree totals  2 runs, 2 steps, 110 in \+ 2 out tokens, 1100 micros$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("jetrun get does not match %s:\n%s", re, text)
		}
	}
}
