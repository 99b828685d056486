// Command nestworker is a test worker process serving agent types the
// end-to-end tests kill with -9 mid-wait:
//
//   - nester: starts one nested demo run (call id "c1", chunks passed
//     through) with its own input and returns the child's outcome;
//   - caller: calls "ask" with its own input and returns the answer;
//   - boss: runs a caller child (call id "b1") and answers its "ask" calls
//     itself, from its second attempt on (the first never answers);
//   - planner: stores step "plan", reports usage (100 in, 10 out tokens,
//     1000 micros) and runs two researcher children (call id "r");
//   - researcher: stores step "search", reports usage (10 in, 1 out, 100);
//   - approver: runs a nested demo run (call id "a1") with its own input
//     once a person approves it (ChildRequest.Approval);
//   - deadliner: waits for an approval whose deadline (500ms) answers
//     {"approved": false, "why": "nobody answered"}, and returns the answer.
//
// Usage: nestworker NATS_URL WORKER_ID [ROW_SYNC] (lease 2s; ROW_SYNC, a
// duration, sets the row sync interval: a long one keeps what an attempt
// learns off its row until it ends). It logs "nestworker serving" once it
// pulls, and stops on SIGTERM or SIGINT.
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

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 3 && len(os.Args) != 4 {
		return fmt.Errorf("usage: nestworker NATS_URL WORKER_ID [ROW_SYNC]")
	}
	var rowSync time.Duration
	if len(os.Args) == 4 {
		d, err := time.ParseDuration(os.Args[3])
		if err != nil {
			return fmt.Errorf("nestworker: row sync interval: %w", err)
		}
		rowSync = d
	}
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
	w, err := worker.New(rt, worker.Config{ID: os.Args[2], Lease: 2 * time.Second, RowSyncInterval: rowSync, Logger: logger})
	if err != nil {
		return err
	}
	w.HandleFunc("nester", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		res, err := run.RunChild(ctx, worker.ChildRequest{
			AgentType: "demo", CallID: "c1", Input: run.Input(), Passthrough: true,
		})
		if err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: "child: " + res.Summary, Output: map[string]any{
			"child": res.RunID, "childOutput": res.Output, "attempt": run.Attempt(),
		}}, nil
	})
	w.HandleFunc("caller", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		out, err := run.Call(ctx, "ask", run.Input())
		if err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: "answered", Output: map[string]any{
			"answer": json.RawMessage(out), "attempt": run.Attempt(),
		}}, nil
	})
	w.HandleFunc("boss", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		res, err := run.RunChild(ctx, worker.ChildRequest{
			AgentType: "caller", CallID: "b1", Input: run.Input(),
			Calls: map[string]parent.CallHandler{"ask": parent.CallHandlerFunc(func(ctx context.Context, call *parent.Call) (any, error) {
				logger.Info("boss got a call", "attempt", run.Attempt(), "call_seq", call.Seq)
				if run.Attempt() == 1 {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return map[string]any{"boss": run.Attempt()}, nil
			})},
		})
		if err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: "boss: " + res.Summary, Output: res.Output}, nil
	})
	w.HandleFunc("approver", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		res, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "demo", CallID: "a1", Input: run.Input(), Approval: &worker.Ask{}})
		if err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: "approver: " + res.Summary, Output: map[string]any{
			"child": res.RunID, "childOutput": res.Output, "attempt": run.Attempt(),
		}}, nil
	})
	w.HandleFunc("deadliner", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		out, err := run.Wait(ctx, "approve", worker.Ask{Kind: events.AskApprove, Title: "ship it?", Deadline: 500 * time.Millisecond,
			Default: map[string]any{"approved": false, "why": "nobody answered"}})
		if err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: "answered", Output: json.RawMessage(out)}, nil
	})
	traced := func(ctx context.Context, run *worker.Run, step string, tokens int64) error {
		_, err := run.Step(ctx, step, func(ctx context.Context) (any, error) {
			// Reported with the step's context: the step's usage, and the run's.
			err := run.Usage(ctx, worker.Usage{InputTokens: tokens, OutputTokens: tokens / 10, CostMicros: tokens * 10, Model: "m"})
			return map[string]string{"did": step}, err
		})
		return err
	}
	w.HandleFunc("planner", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		if err := traced(ctx, run, "plan", 100); err != nil {
			return worker.Result{}, err
		}
		for i := range 2 {
			if _, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "researcher", CallID: "r", DisplayOrder: i, Input: i}); err != nil {
				return worker.Result{}, err
			}
		}
		return worker.Result{Summary: "planned"}, nil
	})
	w.HandleFunc("researcher", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		return worker.Result{Summary: "found"}, traced(ctx, run, "search", 10)
	})
	if err := w.Start(ctx); err != nil {
		return err
	}
	logger.Info("nestworker serving", "worker", w.ID())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.Shutdown(sctx)
}
