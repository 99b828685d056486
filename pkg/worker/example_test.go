package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A worker serves the "greet" agent type: New builds it, HandleFunc
// registers the handler, Start connects it to JetStream and starts
// pulling dispatches. A parent (here in the same process) runs one.
func Example() {
	// A server for the example; your code connects to its own, with
	// nats.Connect(nats.DefaultURL) say.
	nc, stop := natstest.ExampleConn()
	defer stop()
	ctx := context.Background()

	// One runtime per process: it creates (or checks) jetrun's streams and
	// buckets, and every role shares it.
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(rt, worker.Config{Concurrency: 4})
	if err != nil {
		log.Fatal(err)
	}
	w.HandleFunc("greet", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var in struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(run.Input(), &in); err != nil {
			return worker.Result{}, err
		}
		if err := run.Chunk(ctx, "hello, "+in.Name); err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: "greeted " + in.Name, Output: map[string]int{"letters": len(in.Name)}}, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Run(ctx, parent.Request{AgentType: "greet", RunID: "greet-1", Input: map[string]string{"name": "Ada"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.RunID, res.Summary, string(res.Output))
	// Output: greet-1 greeted Ada {"letters":3}
}
