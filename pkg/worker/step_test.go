package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A step stored by one attempt is returned to the next without running
// again; a step whose function failed is run again; a failure marked
// Cancel is stored and returned again (a StepError that errors.As finds a
// CancelError in); a name reused in one attempt returns the stored value;
// names and sizes are checked.
func TestStepsAreStoredOnceAcrossAttempts(t *testing.T) {
	t.Parallel()
	var plans, refusals, flaky atomic.Int64
	type plan struct {
		Topic string `json:"topic"`
		Try   int    `json:"try"`
	}
	checks := make(chan error, 8)
	h := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		p, err := worker.Step(ctx, run, "plan-1", func(ctx context.Context) (plan, error) {
			plans.Add(1)
			return plan{Topic: "tides", Try: run.Attempt()}, nil
		})
		if err != nil {
			return worker.Result{}, err
		}
		again, err := run.Step(ctx, "plan-1", func(ctx context.Context) (any, error) { return "never", nil })
		if err != nil || string(again) != `{"topic":"tides","try":1}` {
			checks <- fmt.Errorf("reused name in attempt %d: %s, %v", run.Attempt(), again, err)
		}
		_, err = run.Step(ctx, "refused", func(ctx context.Context) (any, error) {
			refusals.Add(1)
			return nil, jetruntype.Cancel(errors.New("prompt refused"))
		})
		var se *worker.StepError
		var ce *jetruntype.CancelError
		if !errors.As(err, &se) || !errors.As(err, &ce) || se.Message != "prompt refused" {
			checks <- fmt.Errorf("permanent failure in attempt %d: %v", run.Attempt(), err)
		}
		if _, err := run.Step(ctx, "bad name", nil); !errors.Is(err, events.ErrInvalidID) {
			checks <- fmt.Errorf("bad name: %v", err)
		}
		big := strings.Repeat("x", events.MaxOutputBytes)
		if _, err := run.Step(ctx, "big", func(ctx context.Context) (any, error) { return big, nil }); !errors.Is(err, worker.ErrTooLarge) {
			checks <- fmt.Errorf("oversized output: %v", err)
		}
		n, err := worker.Step(ctx, run, "flaky", func(ctx context.Context) (int, error) {
			if flaky.Add(1) == 1 {
				return 0, errors.New("upstream 503")
			}
			return 42, nil
		})
		if err != nil {
			return worker.Result{}, jetruntype.RetryAfter(err, 0) // not stored: the next attempt runs it again
		}
		return worker.Result{Output: map[string]any{"plan": p, "n": n}}, nil
	})
	b, _ := setup(t, worker.Config{MaxAttempts: 3}, map[string]worker.Handler{"stepper": h})
	publish(t, b.js, "jetrun.dispatch.stepper", `{"runId":"st1","input":{}}`)

	row := jetruntest.WaitRow(t, b.store, "st1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("row: status %s attempt %d error %q", row.Status, row.Attempt, row.Error)
	}
	close(checks)
	for err := range checks {
		t.Error(err)
	}
	if string(row.Output) != `{"n":42,"plan":{"topic":"tides","try":1}}` {
		t.Errorf("output = %s", row.Output)
	}
	if plans.Load() != 1 || refusals.Load() != 1 || flaky.Load() != 2 {
		t.Errorf("step functions ran: plan %d, refused %d, flaky %d; want 1, 1, 2", plans.Load(), refusals.Load(), flaky.Load())
	}
	var stored []string
	for _, ev := range jetruntest.ReadEvents(t, b.js, "st1") {
		if st := ev.Step; st != nil {
			stored = append(stored, fmt.Sprintf("%s@%d", st.Name, st.Attempt))
		}
	}
	if got := fmt.Sprint(stored); got != "[plan-1@1 refused@1 flaky@2]" {
		t.Errorf("stored steps = %s", got)
	}
}

// What a step's function reports with its context is the step's usage,
// stored with it and counted in the run's totals once: the attempt that
// finds the step stored does not run it, so it reports nothing again.
// Usage reported outside any step is the run's only.
func TestStepStoresTheUsageItsFunctionReported(t *testing.T) {
	t.Parallel()
	h := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		if _, err := run.Step(ctx, "think-1", func(ctx context.Context) (any, error) {
			if err := run.Usage(ctx, worker.Usage{InputTokens: 100, OutputTokens: 20, CostMicros: 7, Model: "m1"}); err != nil {
				return nil, err
			}
			return "an idea", run.Usage(ctx, worker.Usage{OutputTokens: 5, Model: "m1"})
		}); err != nil {
			return worker.Result{}, err
		}
		if err := run.Usage(ctx, worker.Usage{InputTokens: 1}); err != nil { // the run's, not a step's
			return worker.Result{}, err
		}
		if run.Attempt() == 1 {
			return worker.Result{}, jetruntype.RetryAfter(errors.New("try again"), 0)
		}
		return worker.Result{Summary: "done"}, nil
	})
	b, _ := setup(t, worker.Config{MaxAttempts: 3}, map[string]worker.Handler{"thinker": h})
	publish(t, b.js, "jetrun.dispatch.thinker", `{"runId":"su1","input":{}}`)

	row := jetruntest.WaitRow(t, b.store, "su1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("row: status %s attempt %d error %q", row.Status, row.Attempt, row.Error)
	}
	var steps []events.Step
	for _, ev := range jetruntest.ReadEvents(t, b.js, "su1") {
		if st := ev.Step; st != nil {
			steps = append(steps, *st)
		}
	}
	if len(steps) != 1 || steps[0].Usage == nil {
		t.Fatalf("stored steps = %+v; want think-1 with its usage", steps)
	}
	want := events.UsageTotals{InputTokens: 100, OutputTokens: 25, CostMicros: 7}
	if got := steps[0].Usage.UsageTotals; got != want || steps[0].Usage.Models["m1"] != want {
		t.Errorf("step usage = %+v; want %+v, all on m1", steps[0].Usage, want)
	}
	// The run: the step's once, plus one input token per attempt.
	wantRun := events.UsageTotals{InputTokens: 102, OutputTokens: 25, CostMicros: 7}
	if row.Usage == nil || row.Usage.UsageTotals != wantRun {
		t.Errorf("run usage = %+v; want %+v", row.Usage, wantRun)
	}
}

// What a step's function reported counts on the run once whatever becomes
// of the step: a function that failed (not stored) leaves its usage to
// the run, one that failed for good (stored) and one that succeeded store
// theirs; a name called again after it is stored reports nothing. The
// row's stepUsage counts the stored steps' usage only.
func TestStepUsageCountsOnceWhateverTheStepBecomes(t *testing.T) {
	t.Parallel()
	spend := func(ctx context.Context, run *worker.Run, n int64) error {
		return run.Usage(ctx, worker.Usage{InputTokens: n, Model: "m"})
	}
	h := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		if _, err := run.Step(ctx, "flaky", func(ctx context.Context) (any, error) {
			return nil, errors.Join(spend(ctx, run, 1), errors.New("upstream 503")) // spent, not stored
		}); err == nil {
			return worker.Result{}, errors.New("flaky step stored")
		}
		if _, err := run.Step(ctx, "refused", func(ctx context.Context) (any, error) {
			return nil, errors.Join(spend(ctx, run, 10), jetruntype.Cancel(errors.New("refused"))) // stored failed
		}); err == nil {
			return worker.Result{}, errors.New("refused step succeeded")
		}
		for range 2 { // the second call finds it stored
			if _, err := run.Step(ctx, "good", func(ctx context.Context) (any, error) {
				return "ok", spend(ctx, run, 100)
			}); err != nil {
				return worker.Result{}, err
			}
		}
		return worker.Result{}, spend(ctx, run, 1000) // the run's own
	})
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{"stepper": h})
	publish(t, b.js, "jetrun.dispatch.stepper", `{"runId":"suo","input":{}}`)
	row := jetruntest.WaitRow(t, b.store, "suo", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("row: %s (%s)", row.Status, row.Error)
	}
	if row.Usage == nil || row.Usage.InputTokens != 1111 || row.Usage.Models["m"].InputTokens != 1111 {
		t.Errorf("usage %+v; want 1111 input tokens, once each", row.Usage)
	}
	if row.StepUsage == nil || row.StepUsage.InputTokens != 110 {
		t.Errorf("step usage %+v; want the stored steps' 110", row.StepUsage)
	}
	if row.TreeUsage == nil || row.TreeUsage.InputTokens != 1111 {
		t.Errorf("tree usage %+v; want 1111", row.TreeUsage)
	}
}

// A nested run's stored step is in its tree's totals before the step is
// stored, long before the run's row is written again (its row syncs once a
// minute here): a worker killed right after the step is stored cannot
// leave the tree without it, and the run taken over adds it to the run's
// own usage only.
func TestNestedStepUsageReachesTheTreeBeforeItIsStored(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b, _ := setup(t, worker.Config{Concurrency: 2, RowSyncInterval: time.Minute}, map[string]worker.Handler{
		"nest": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if run.Depth() == 0 {
				_, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "nest", CallID: "c", Input: 1})
				return worker.Result{}, err
			}
			if _, err := run.Step(ctx, "think", func(ctx context.Context) (any, error) {
				return "idea", run.Usage(ctx, worker.Usage{InputTokens: 40, OutputTokens: 2})
			}); err != nil {
				return worker.Result{}, err
			}
			select {
			case <-release:
			case <-ctx.Done():
				return worker.Result{}, ctx.Err()
			}
			return worker.Result{}, nil
		}),
	})
	publish(t, b.js, "jetrun.dispatch.nest", `{"runId":"nest-top","input":{}}`)
	child := parent.RunID("nest-top", "c")
	jetruntest.WaitRow(t, b.store, "nest-top", 30*time.Second, func(r *model.Row) bool {
		return r.TreeUsage != nil && r.TreeUsage.Tokens() == 42
	})
	if row, _, err := b.store.Get(context.Background(), child); err != nil || row.Usage != nil {
		t.Fatalf("child row before its sync: usage %+v, %v; want none yet", row.Usage, err)
	}
	close(release)
	top := jetruntest.WaitRow(t, b.store, "nest-top", 30*time.Second, jetruntest.Final)
	kid := jetruntest.WaitRow(t, b.store, child, 30*time.Second, jetruntest.Final)
	if top.TreeUsage == nil || top.TreeUsage.Tokens() != 42 || kid.Usage == nil || kid.Usage.Tokens() != 42 || kid.TreeUsage != nil {
		t.Fatalf("tree %+v, child usage %+v, child tree %+v; want 42 once", top.TreeUsage, kid.Usage, kid.TreeUsage)
	}
}
