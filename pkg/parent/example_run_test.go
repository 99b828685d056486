package parent_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/app/embedded"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Run dispatches a run and waits for its outcome: a completed run's result,
// or a *parent.Failure as the error for any other outcome. Running the same
// run id again re-attaches to the run instead of starting another.
func ExampleClient_Run() {
	nc, stop := startNATS()
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
	if f, ok := parent.IsFailure(err); ok {
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
