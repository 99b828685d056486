package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A durable step: the "model call" runs once per run. The first attempt
// stores its answer and then asks for another attempt (RetryAfter; a crash
// or a takeover does the same); the second attempt gets the stored answer
// back without calling the model again.
func ExampleStep() {
	// A server for the example; your code connects to its own, with
	// nats.Connect(nats.DefaultURL) say.
	nc, stop := natstest.ExampleConn()
	defer stop()
	ctx := context.Background()
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(rt, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	modelCalls := 0
	w.HandleFunc("agent", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		plan, err := worker.Step(ctx, run, "plan-1", func(ctx context.Context) (string, error) {
			modelCalls++ // a paid model call
			return "look up the tide tables", nil
		})
		if err != nil {
			return worker.Result{}, err
		}
		if run.Attempt() == 1 {
			return worker.Result{}, jetruntype.RetryAfter(errors.New("tool server busy"), 0)
		}
		return worker.Result{Summary: fmt.Sprintf("attempt %d: %s", run.Attempt(), plan)}, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Run(ctx, parent.Request{AgentType: "agent", RunID: "agent-1", Input: map[string]string{"topic": "tides"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Summary)
	fmt.Println("model calls:", modelCalls)
	// Output:
	// attempt 2: look up the tide tables
	// model calls: 1
}
