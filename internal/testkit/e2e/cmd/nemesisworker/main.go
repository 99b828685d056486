// Command nemesisworker is the child-worker of the nemesis test
// (TestClusterNemesis): a jetrun worker process, configured like
// child-worker from JETRUN_* variables (its NATS user and password, lease,
// concurrency, worker id), serving two agent types whose durable steps
// report usage and record every execution of their work:
//
//   - nm-step: input {"steps": n, "stepMs": ms, "tokens": k}; step "s-<i>"
//     for i in 1..n waits stepMs, reports usage (k+i input tokens, k/5
//     output, 7k micros, model "nm") with the step's context and stores
//     {"i": i, "attempt": a};
//   - nm-nest: input {"tokens": k, "stepMs": ms, "children": [<nm-step
//     input>, …]}: step "plan" (as above, i = 0), then one nested nm-step
//     run per element (call id "kid", display order its index), started
//     together and awaited in order.
//
// Before the work of a step, the process appends the line
// "B <runId> <step> <attempt> <in> <out> <micros>" to the file
// NEMESIS_EXEC_LOG (one write; a kill -9 loses no completed write): the
// test counts executions of each step's work from it, and what each
// execution may have reported. It logs "nemesisworker serving" once it
// pulls, and stops on SIGTERM or SIGINT like child-worker.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/app/cli"
	"github.com/jetrun/jetrun/internal/app/config"
	"github.com/jetrun/jetrun/internal/app/natsconn"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// spec is child-worker's configuration and the execution log's path.
type spec struct {
	config.ChildWorker
	ExecLog string `envconfig:"NEMESIS_EXEC_LOG" desc:"file each execution of a step's work is appended to"`
}

func (s *spec) Validate() error {
	if s.ExecLog == "" {
		return errors.New("NEMESIS_EXEC_LOG is required")
	}
	return s.ChildWorker.Validate()
}

func main() {
	var cfg spec
	os.Exit(cli.Main("nemesisworker", "serves the nemesis test's agent types", os.Args[1:], &cfg,
		func(ctx, abort context.Context, logger *slog.Logger) error { return run(ctx, abort, &cfg, logger) }))
}

func run(ctx, abort context.Context, cfg *spec, logger *slog.Logger) error {
	f, err := os.OpenFile(cfg.ExecLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	log := &execLog{f: f}
	nc, err := natsconn.Connect(cfg.NATS, "nemesisworker", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	rt, err := jetrun.Open(ctx, nc, cfg.Streams.Runtime())
	if err != nil {
		return err
	}
	w, err := worker.New(rt, cfg.Pool.WorkerConfig(logger))
	if err != nil {
		return err
	}
	w.HandleFunc("nm-step", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var in stepInput
		if err := json.Unmarshal(run.Input(), &in); err != nil {
			return worker.Result{}, fmt.Errorf("nm-step input: %w", err)
		}
		return stepper(ctx, run, log, in)
	})
	w.HandleFunc("nm-nest", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var in nestInput
		if err := json.Unmarshal(run.Input(), &in); err != nil {
			return worker.Result{}, fmt.Errorf("nm-nest input: %w", err)
		}
		return nester(ctx, run, log, in)
	})
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	logger.Info("nemesisworker serving", "worker", w.ID())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(abort, cfg.ShutdownTimeout)
	defer cancel()
	return w.Shutdown(sctx)
}

type stepInput struct {
	Steps  int   `json:"steps"`
	StepMs int   `json:"stepMs"`
	Tokens int64 `json:"tokens"`
}

type nestInput struct {
	Tokens   int64       `json:"tokens"`
	StepMs   int         `json:"stepMs"`
	Children []stepInput `json:"children"`
}

// usageOf is what step i of a run with tokens k reports.
func usageOf(k int64, i int) worker.Usage {
	return worker.Usage{InputTokens: k + int64(i), OutputTokens: k / 5, CostMicros: 7 * k, Model: "nm"}
}

// stepOutput is what a step stores.
type stepOutput struct {
	I       int `json:"i"`
	Attempt int `json:"attempt"`
}

// work is step i's work: recorded, then stepMs of waiting, then its usage.
func work(ctx context.Context, run *worker.Run, log *execLog, name string, i, stepMs int, k int64) (stepOutput, error) {
	u := usageOf(k, i)
	if err := log.add(run.ID(), name, run.Attempt(), u); err != nil {
		return stepOutput{}, err
	}
	t := time.NewTimer(time.Duration(stepMs) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return stepOutput{}, context.Cause(ctx)
	case <-t.C:
	}
	if err := run.Usage(ctx, u); err != nil {
		return stepOutput{}, err
	}
	return stepOutput{I: i, Attempt: run.Attempt()}, nil
}

func stepper(ctx context.Context, run *worker.Run, log *execLog, in stepInput) (worker.Result, error) {
	for i := 1; i <= in.Steps; i++ {
		name := "s-" + strconv.Itoa(i)
		if _, err := worker.Step(ctx, run, name, func(ctx context.Context) (stepOutput, error) {
			return work(ctx, run, log, name, i, in.StepMs, in.Tokens)
		}); err != nil {
			return worker.Result{}, err
		}
		if err := run.Progress(ctx, worker.Progress{Fraction: float64(i) / float64(in.Steps), Message: name}); err != nil {
			return worker.Result{}, err
		}
	}
	return worker.Result{Summary: fmt.Sprintf("%d steps", in.Steps), Output: map[string]int{"attempt": run.Attempt()}}, nil
}

func nester(ctx context.Context, run *worker.Run, log *execLog, in nestInput) (worker.Result, error) {
	if _, err := worker.Step(ctx, run, "plan", func(ctx context.Context) (stepOutput, error) {
		return work(ctx, run, log, "plan", 0, in.StepMs, in.Tokens)
	}); err != nil {
		return worker.Result{}, err
	}
	kids := make([]*worker.Child, 0, len(in.Children))
	for i, c := range in.Children {
		k, err := run.Spawn(ctx, worker.ChildRequest{AgentType: "nm-step", CallID: "kid", DisplayOrder: i, Input: c})
		if err != nil {
			return worker.Result{}, fmt.Errorf("start nested run %d: %w", i, err)
		}
		kids = append(kids, k)
	}
	for _, k := range kids {
		if _, err := k.Await(ctx); err != nil {
			return worker.Result{}, fmt.Errorf("nested run %s: %w", k.ID, err)
		}
	}
	return worker.Result{Summary: fmt.Sprintf("%d nested runs", len(kids))}, nil
}

// execLog is the execution log: one line per execution of a step's work.
type execLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *execLog) add(runID, step string, attempt int, u worker.Usage) error {
	line := fmt.Sprintf("B %s %s %d %d %d %d\n", runID, step, attempt, u.InputTokens, u.OutputTokens, u.CostMicros)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.WriteString(line); err != nil {
		return fmt.Errorf("execution log: %w", err)
	}
	return nil
}
