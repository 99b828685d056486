package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A planner fans out to researchers, each paying for a model call it
// reports with Run.Usage. The planner's budget bounds the whole tree: the
// report that goes past it stops every run of the tree, interrupted with
// reason budget-exceeded, and the planner's row says by how much.
func ExampleRun_Usage() {
	// A server for the example; your code connects to its own, with
	// nats.Connect(nats.DefaultURL) say.
	nc, stop := natstest.ExampleConn()
	defer stop()
	ctx := context.Background()
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(rt, worker.Config{Concurrency: 4})
	if err != nil {
		log.Fatal(err)
	}
	w.HandleFunc("researcher", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		// ... the model call ...
		if err := run.Usage(ctx, worker.Usage{InputTokens: 60, OutputTokens: 40, CostMicros: 300, Model: "small"}); err != nil {
			return worker.Result{}, err // ErrBudgetExceeded: the tree is stopped
		}
		return worker.Result{Summary: "found it"}, nil
	})
	w.HandleFunc("planner", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		for i := range 3 {
			if _, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "researcher", CallID: fmt.Sprint("q", i), Input: i}); err != nil {
				return worker.Result{}, err
			}
		}
		return worker.Result{Summary: "planned"}, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Run(ctx, parent.Request{AgentType: "planner", RunID: "plan-1", Input: "tides",
		Budget: &events.TreeBudget{Tokens: 250}})
	var f *parent.Failure
	if errors.As(err, &f) {
		fmt.Println(f.Status, f.Reason)
	}
	row, err := client.Inspect(ctx, "plan-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("tree: %d tokens, %d micros\n", row.TreeUsage.Tokens(), row.TreeUsage.CostMicros)
	fmt.Println(row.Overrun)
	// Output:
	// interrupted budget-exceeded
	// tree: 300 tokens, 900 micros
	// the tokens budget of run plan-1 (250) was exceeded by 50 (used 300)
}
