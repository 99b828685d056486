// Command stepworker is a test worker process serving agent type
// "stepper", which the end-to-end tests kill with -9 inside and between
// durable steps. A stepper run's input is {"dir": "…", "steps": ["one",
// …]}: it runs worker.Step for each name in order, and each step's
// function first appends its attempt number as a line to the file
// <dir>/<name> (the side-effect counter), then, if <dir>/<name>.hold
// exists, waits until <dir>/<name>.go exists too (so a test can kill the
// worker inside the step). The run's output maps each step to the attempt
// whose output it got. With "usage" (a worker.Usage) in the input, each
// step reports it with the step's context once its work is done (after
// the hold), so it is stored with the step. With "reserve" (a
// worker.Usage), each step's function first reserves it (Run.Reserve,
// before the counter line), so a reservation is held through the hold.
// With "usageFirst" as well, each step reports its usage before the counter
// line (so before the hold): a worker killed in the hold dies after its
// step reported what it spent, before the step is stored.
//
// Usage: stepworker NATS_URL WORKER_ID (lease 2s). It logs "stepworker
// serving" once it pulls, and stops on SIGTERM or SIGINT. STEPWORKER_ROW_SYNC,
// a duration, sets the worker's RowSyncInterval (a test that kills the
// worker right after steps are stored sets it long, so no row sync comes
// between them); STEPWORKER_MAX_ATTEMPTS its MaxAttempts.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 3 {
		return fmt.Errorf("usage: stepworker NATS_URL WORKER_ID")
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
	var rowSync time.Duration
	if v := os.Getenv("STEPWORKER_ROW_SYNC"); v != "" {
		if rowSync, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("STEPWORKER_ROW_SYNC: %w", err)
		}
	}
	var maxAttempts int
	if v := os.Getenv("STEPWORKER_MAX_ATTEMPTS"); v != "" {
		if maxAttempts, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("STEPWORKER_MAX_ATTEMPTS: %w", err)
		}
	}
	w, err := worker.New(rt, worker.Config{ID: os.Args[2], Lease: 2 * time.Second, RowSyncInterval: rowSync,
		MaxAttempts: maxAttempts, Logger: logger})
	if err != nil {
		return err
	}
	w.HandleFunc("stepper", stepper)
	if err := w.Start(ctx); err != nil {
		return err
	}
	logger.Info("stepworker serving", "worker", w.ID())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.Shutdown(sctx)
}

func stepper(ctx context.Context, run *worker.Run) (worker.Result, error) {
	var in struct {
		Dir        string        `json:"dir"`
		Steps      []string      `json:"steps"`
		Usage      *worker.Usage `json:"usage"`
		Reserve    *worker.Usage `json:"reserve"`
		UsageFirst bool          `json:"usageFirst"`
	}
	if err := json.Unmarshal(run.Input(), &in); err != nil {
		return worker.Result{}, err
	}
	out := make(map[string]int)
	for _, name := range in.Steps {
		got, err := worker.Step(ctx, run, name, func(ctx context.Context) (int, error) {
			if in.Reserve != nil {
				if _, err := run.Reserve(ctx, *in.Reserve); err != nil {
					return 0, err
				}
			}
			if in.Usage != nil && in.UsageFirst {
				if err := run.Usage(ctx, *in.Usage); err != nil {
					return 0, err
				}
			}
			if err := appendLine(filepath.Join(in.Dir, name), strconv.Itoa(run.Attempt())); err != nil {
				return 0, err
			}
			if exists(filepath.Join(in.Dir, name+".hold")) {
				if err := waitFor(ctx, filepath.Join(in.Dir, name+".go")); err != nil {
					return 0, err
				}
			}
			if in.Usage != nil && !in.UsageFirst {
				if err := run.Usage(ctx, *in.Usage); err != nil {
					return 0, err
				}
			}
			return run.Attempt(), nil
		})
		if err != nil {
			return worker.Result{}, err
		}
		out[name] = got
	}
	return worker.Result{Summary: fmt.Sprintf("attempt %d", run.Attempt()), Output: out}, nil
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// waitFor polls for path until it exists or ctx ends.
func waitFor(ctx context.Context, path string) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !exists(path) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
