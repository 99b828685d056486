package jetruncli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/jetruncli"
	"github.com/jetrun/jetrun/internal/jetruntest"
	"github.com/jetrun/jetrun/internal/natstest"
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
