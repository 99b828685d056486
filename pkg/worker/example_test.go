package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/app/embedded"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A worker serves the "greet" agent type: New builds it, HandleFunc
// registers the handler, Start connects it to JetStream and starts
// pulling dispatches. A parent (here in the same process) runs one.
func Example() {
	nc, stop := startNATS()
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

// startNATS starts an embedded nats-server with JetStream on a random
// loopback port and connects to it; stop closes both.
func startNATS() (*nats.Conn, func()) {
	dir, err := os.MkdirTemp("", "jetrun-example-")
	if err != nil {
		log.Fatal(err)
	}
	ns, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	return nc, func() {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}
