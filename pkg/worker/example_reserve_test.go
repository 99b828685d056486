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

// A researcher reserves what its model call may spend before making it:
// the reservation that does not fit the tree's budget is refused before
// anything is paid, so the tree ends within its budget; the report after
// the call settles the reservation with the real spend.
func ExampleRun_Reserve() {
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
		res, err := run.Reserve(ctx, worker.Usage{InputTokens: 60, OutputTokens: 40}) // at most this
		if err != nil {
			return worker.Result{}, err // ErrBudgetExceeded: nothing was paid
		}
		defer res.Release() // if the call fails before it is paid; a no-op once settled
		// ... the model call ...
		if err := run.Usage(ctx, worker.Usage{InputTokens: 55, OutputTokens: 30, Model: "small"}); err != nil { // settles it
			return worker.Result{}, err
		}
		return worker.Result{Summary: "found it"}, nil
	})
	w.HandleFunc("planner", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		for i := range 3 {
			_, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "researcher", CallID: fmt.Sprint("q", i), Input: i})
			if f := (*parent.Failure)(nil); errors.As(err, &f) && f.Reason == events.ReasonBudgetExceeded {
				return worker.Result{Summary: fmt.Sprintf("planned with %d researchers: the budget is spent", i)}, nil
			}
			if err != nil {
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
	res, err := client.Run(ctx, parent.Request{AgentType: "planner", RunID: "plan-r", Input: "tides",
		Budget: &events.TreeBudget{Tokens: 250}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Summary) // the third researcher's reservation was refused
	row, err := client.Inspect(ctx, "plan-r")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("tree: %d tokens of 250, stopped: %v\n", row.TreeUsage.Tokens(), row.Overrun != nil)
	// Output:
	// planned with 2 researchers: the budget is spent
	// tree: 170 tokens of 250, stopped: false
}
