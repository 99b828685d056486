package parent_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Run dispatches a run and waits for its outcome: a completed run's result,
// or a *parent.Failure as the error for any other outcome. Running the same
// run id again re-attaches to the run instead of starting another.
func ExampleClient_Run() {
	// A server for the example; your code connects to its own, with
	// nats.Connect(nats.DefaultURL) say.
	nc, stop := natstest.ExampleConn()
	defer stop()
	ctx := context.Background()

	// A worker somewhere serves the "check" agent type.
	// One runtime per process: it creates (or checks) jetrun's streams and
	// buckets, and every role shares it.
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(rt, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w.HandleFunc("check", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		if string(run.Input()) == `"bad"` {
			return worker.Result{}, errors.New("input is bad")
		}
		return worker.Result{Summary: "looks fine", Output: map[string]bool{"ok": true}}, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Run(ctx, parent.Request{AgentType: "check", RunID: "check-1", Input: "good"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.RunID, res.Summary, string(res.Output))

	_, err = client.Run(ctx, parent.Request{AgentType: "check", RunID: "check-2", Input: "bad"})
	var f *parent.Failure
	if errors.As(err, &f) {
		fmt.Println(f.RunID, f.Status, f.Message)
	}

	again, err := client.Run(ctx, parent.Request{AgentType: "check", RunID: "check-1", Input: "good"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.RunID, again.Row.Attempt)
	// Output:
	// check-1 looks fine {"ok":true}
	// check-2 error input is bad
	// check-1 1
}

// Inspect reads a run's row; a run id with no row (never dispatched, or
// cleared) is ErrRunNotFound.
func ExampleClient_Inspect() {
	// A server for the example; your code connects to its own, with
	// nats.Connect(nats.DefaultURL) say.
	nc, stop := natstest.ExampleConn()
	defer stop()
	ctx := context.Background()
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(rt, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w.HandleFunc("count", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		return worker.Result{Summary: "counted", Output: len(run.Input())}, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	if _, err := client.Run(ctx, parent.Request{AgentType: "count", RunID: "count-1", Input: "abc"}); err != nil {
		log.Fatal(err)
	}

	row, err := client.Inspect(ctx, "count-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(row.ID, row.Status, row.Attempt, row.Summary)

	if _, err := client.Inspect(ctx, "never-1"); errors.Is(err, parent.ErrRunNotFound) {
		fmt.Println("no run never-1")
	}
	// Output:
	// count-1 completed 1 counted
	// no run never-1
}
