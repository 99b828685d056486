package jetrun_test

import (
	"context"
	"fmt"
	"log"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// One runtime per process, shared by its roles: Open creates (or checks)
// the streams and buckets, the roles' constructors do no I/O, and each
// role starts on its own. Here one process both serves and runs an agent
// type; usually workers and parents are different processes.
func ExampleOpen() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		log.Fatal(err)
	}

	w, err := worker.New(rt, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w.HandleFunc("research", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		return worker.Result{Summary: "researched " + string(run.Input())}, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Run(ctx, parent.Request{AgentType: "research", Input: "tides"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Summary)
}
