package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
	"github.com/jetrun/jetrun/pkg/worker/workertest"
)

func TestRunChecksWhatAWorkerChecks(t *testing.T) {
	t.Parallel()
	run := workertest.NewRun(workertest.Config{})
	h := run.Handle()
	ctx := context.Background()
	if err := h.Chunk(ctx, strings.Repeat("x", events.MaxChunkBytes+1)); !errors.Is(err, worker.ErrTooLarge) {
		t.Fatalf("oversized chunk: %v", err)
	}
	if err := h.Chunk(ctx, func() {}); err == nil {
		t.Fatal("a func chunk was accepted")
	}
	if _, err := h.Milestone(ctx, "", nil); err == nil {
		t.Fatal("an empty milestone name was accepted")
	}
	if _, err := h.Wait(ctx, "a.b"); err == nil {
		t.Fatal("a signal name with a dot was accepted")
	}
	if _, err := h.Spawn(ctx, worker.ChildRequest{AgentType: "x"}); !errors.Is(err, workertest.ErrUnsupported) {
		t.Fatalf("spawn: %v", err)
	}
	if len(run.Chunks()) != 0 || len(run.Milestones()) != 0 {
		t.Fatal("refused calls were recorded")
	}
}

func TestRunDescribesTheConfiguredRun(t *testing.T) {
	t.Parallel()
	earlier := []events.Milestone{{RunID: "r9", Name: "fetched", Sequence: 1, Attempt: 1}}
	run := workertest.NewRun(workertest.Config{ID: "r9", AgentType: "summarize", Attempt: 2, Parent: "p1", Depth: 1,
		Input: json.RawMessage(`{"a":1}`), Milestones: earlier,
		Call: func(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`"` + name + `:` + string(input) + `"`), nil
		}})
	res, err := run.Serve(context.Background(), worker.HandlerFunc(func(ctx context.Context, r *worker.Run) (worker.Result, error) {
		if r.ID() != "r9" || r.AgentType() != "summarize" || r.Attempt() != 2 || r.Parent() != "p1" || r.Depth() != 1 ||
			string(r.Input()) != `{"a":1}` || len(r.Milestones()) != 1 {
			t.Errorf("run = %s %s %d %s %d %s %v", r.ID(), r.AgentType(), r.Attempt(), r.Parent(), r.Depth(), r.Input(), r.Milestones())
		}
		out, err := r.Call(ctx, "lookup", 7)
		if err != nil {
			return worker.Result{}, err
		}
		m, err := r.Milestone(ctx, "summarized", nil)
		if err != nil || m.Sequence != 2 || m.Attempt != 2 {
			t.Errorf("milestone = %+v, %v", m, err)
		}
		return worker.Result{Summary: string(out)}, r.Flush(ctx)
	}))
	if err != nil || res.Summary != `"lookup:7"` || !run.Returned() {
		t.Fatalf("serve = %+v, %v", res, err)
	}
	if got, _ := run.Result(); got.Summary != res.Summary {
		t.Fatalf("result = %+v", got)
	}
	if ms := run.Milestones(); len(ms) != 2 || ms[1].Name != "summarized" {
		t.Fatalf("milestones = %+v", ms)
	}
}

func TestCancelBeforeServeStartsTheHandlerCancelled(t *testing.T) {
	t.Parallel()
	run := workertest.NewRun(workertest.Config{})
	run.Cancel(worker.ErrShuttingDown)
	_, err := run.Serve(context.Background(), worker.HandlerFunc(func(ctx context.Context, r *worker.Run) (worker.Result, error) {
		_, err := r.Wait(ctx, "never")
		return worker.Result{}, err
	}))
	if !errors.Is(err, worker.ErrShuttingDown) {
		t.Fatalf("err = %v", err)
	}
}

// A step that Config.Steps says an earlier attempt stored is returned
// without running; a new one runs and is recorded.
func TestRunStepsReplayConfiguredSteps(t *testing.T) {
	t.Parallel()
	run := workertest.NewRun(workertest.Config{Attempt: 2, Steps: []events.Step{
		{RunID: workertest.DefaultRunID, Name: "plan-1", Output: json.RawMessage(`"stored plan"`), Attempt: 1},
	}})
	ran := 0
	res, err := run.Serve(context.Background(), worker.HandlerFunc(func(ctx context.Context, r *worker.Run) (worker.Result, error) {
		plan, err := worker.Step(ctx, r, "plan-1", func(ctx context.Context) (string, error) { ran++; return "new plan", nil })
		if err != nil {
			return worker.Result{}, err
		}
		n, err := worker.Step(ctx, r, "count", func(ctx context.Context) (int, error) { ran++; return 7, nil })
		return worker.Result{Summary: fmt.Sprintf("%s %d", plan, n)}, err
	}))
	if err != nil || res.Summary != "stored plan 7" || ran != 1 {
		t.Fatalf("summary %q, err %v, functions ran %d; want the stored plan and one run", res.Summary, err, ran)
	}
	steps := run.Steps()
	if len(steps) != 2 || steps[1].Name != "count" || string(steps[1].Output) != "7" || steps[1].Attempt != 2 {
		t.Fatalf("steps = %+v", steps)
	}
}
