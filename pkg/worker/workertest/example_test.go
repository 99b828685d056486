package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/worker"
	"github.com/jetrun/jetrun/pkg/worker/workertest"
)

// research is the handler under test: it streams a chunk per step, reports
// progress, marks a milestone, and waits for an approval signal.
func research(ctx context.Context, run *worker.Run) (worker.Result, error) {
	var in struct {
		Topic string `json:"topic"`
		Steps int    `json:"steps"`
	}
	if err := json.Unmarshal(run.Input(), &in); err != nil {
		return worker.Result{}, err
	}
	for i := 1; i <= in.Steps; i++ {
		if err := run.Chunk(ctx, fmt.Sprintf("%s: step %d", in.Topic, i)); err != nil {
			return worker.Result{}, err
		}
		if err := run.Progress(ctx, worker.Progress{Fraction: float64(i) / float64(in.Steps), Phase: "research"}); err != nil {
			return worker.Result{}, err
		}
	}
	if _, err := run.Milestone(ctx, "drafted", map[string]int{"steps": in.Steps}); err != nil {
		return worker.Result{}, err
	}
	approval, err := run.Wait(ctx, "approve")
	if err != nil {
		return worker.Result{}, err
	}
	return worker.Result{Summary: "researched " + in.Topic, Output: approval}, nil
}

func Example() {
	run := workertest.NewRun(workertest.Config{AgentType: "research", Input: map[string]any{"topic": "tides", "steps": 2}})
	// The approval arrives while the handler waits for it (or before: signals are kept).
	go func() {
		_ = run.WaitFor(context.Background(), func(r *workertest.Run) bool { return r.Waiting() == "approve" })
		_ = run.Signal("approve", map[string]bool{"ok": true})
	}()

	res, err := run.Serve(context.Background(), worker.HandlerFunc(research))
	fmt.Println(res.Summary, string(res.Output.(json.RawMessage)), err)
	for _, c := range run.Chunks() {
		fmt.Println("chunk", string(c))
	}
	for _, p := range run.Progress() {
		fmt.Println("progress", p.Fraction, p.Phase)
	}
	for _, m := range run.Milestones() {
		fmt.Println("milestone", m.Sequence, m.Name, string(m.Data))
	}
	// Output:
	// researched tides {"ok":true} <nil>
	// chunk "tides: step 1"
	// chunk "tides: step 2"
	// progress 0.5 research
	// progress 1 research
	// milestone 1 drafted {"steps":2}
}

// A test cancels the run, as a user's cancel would, once the handler has
// done what the test waits for.
func ExampleRun_Cancel() {
	run := workertest.NewRun(workertest.Config{})
	go func() {
		_ = run.WaitFor(context.Background(), func(r *workertest.Run) bool { return len(r.Chunks()) == 3 })
		run.Cancel(nil)
	}()
	_, err := run.Serve(context.Background(), worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		for i := 1; ; i++ {
			if err := run.Chunk(ctx, i); err != nil {
				return worker.Result{}, err
			}
			if i == 3 {
				<-ctx.Done()
				return worker.Result{}, context.Cause(ctx)
			}
		}
	}))
	fmt.Println(err, len(run.Chunks()))
	// After the handler returned, its Run refuses writes, as on a worker.
	fmt.Println(run.Handle().Chunk(context.Background(), "late"))
	// Output:
	// run cancelled 3
	// run lease lost
}

// A test asserts how a handler asked its run to end: RetryAfter and Cancel
// return errors that errors.As finds, with the delay asked for.
func ExampleRun_Serve_retryAfter() {
	fetch := func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		// The upstream said 429, Retry-After: 30.
		return worker.Result{}, jetruntype.RetryAfter(errors.New("rate limited"), 30*time.Second)
	}
	run := workertest.NewRun(workertest.Config{})
	_, err := run.Serve(context.Background(), worker.HandlerFunc(fetch))
	var retry *jetruntype.RetryError
	fmt.Println(errors.As(err, &retry), retry.Delay, err)
	// Output:
	// true 30s rate limited
}
