// Command callserver is a test parent process serving calls named "ask"
// with a parent.CallServer (ack wait 2s). The end-to-end tests kill it
// with -9 mid-call and start another.
//
// Usage: callserver NATS_URL MODE, where MODE is "hang" (log "call
// received" and never answer) or "answer" (answer {"by": "answer", "q":
// <input>} and log "answering call").
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 3 || (os.Args[2] != "hang" && os.Args[2] != "answer") {
		return fmt.Errorf("usage: callserver NATS_URL hang|answer")
	}
	mode := os.Args[2]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	nc, err := nats.Connect(os.Args[1])
	if err != nil {
		return err
	}
	defer nc.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		return err
	}
	client, err := parent.New(rt, parent.Config{Logger: logger})
	if err != nil {
		return err
	}
	srv, err := client.NewCallServer(parent.CallServerConfig{AckWait: 2 * time.Second})
	if err != nil {
		return err
	}
	srv.HandleFunc("ask", func(ctx context.Context, call *parent.Call) (any, error) {
		logger.Info("call received", "run_id", call.RunID, "seq", call.Seq)
		if mode == "hang" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		logger.Info("answering call", "run_id", call.RunID, "seq", call.Seq)
		return map[string]any{"by": mode, "q": json.RawMessage(call.Input)}, nil
	})
	if err := srv.Start(ctx); err != nil {
		return err
	}
	logger.Info("callserver serving", "mode", mode)
	<-ctx.Done()
	return srv.Stop()
}
