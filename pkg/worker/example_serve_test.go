package worker_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A worker process: it serves the "research" agent type until SIGINT or
// SIGTERM, then lets its runs in flight finish for up to 30 s and hands
// the rest back to be taken over at once (Shutdown). Parents dispatch the
// runs from elsewhere (parent.Client.Dispatch, the HTTP API, a plain NATS
// publish).
func Example_serve() {
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
	w, err := worker.New(rt, worker.Config{Concurrency: 500})
	if err != nil {
		log.Fatal(err)
	}
	w.HandleFunc("research", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		if err := run.Chunk(ctx, "thinking…"); err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: "done"}, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}

	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-sig.Done()

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Shutdown(shutdownCtx); err != nil {
		log.Print(err)
	}
}
