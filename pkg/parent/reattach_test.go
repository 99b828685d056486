package parent_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// An awaiting caller gives up after its no-progress window, softly: the run
// goes on, and awaiting the same id again re-attaches to its real result. A
// run that keeps making progress is waited for however long it takes.
func TestAwaitGivesUpAfterNoProgressAndReattaches(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	ctx := t.Context()
	// A window wide enough that a loaded machine does not stretch the
	// handler's 100 ms beats past it; the handler runs for 1.2 s in all.
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	c, err := parent.New(rt, parent.Config{ReattachNoProgress: 700 * time.Millisecond, AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}

	// No worker serves the agent type yet.
	_, err = c.Run(ctx, parent.Request{AgentType: "later", RunID: "q1", Input: 1})
	var f *parent.Failure
	ok := errors.As(err, &f)
	if !ok || f.Status != events.StatusInterrupted || f.Reason != events.ReasonNoProgress || !f.ChildStillRunning || !f.Retryable {
		t.Fatalf("await without a worker: %v", err)
	}
	if row, _ := c.Inspect(ctx, "q1"); row.Status != events.StatusStarting {
		t.Fatalf("the run was touched: %+v", row)
	}
	t.Logf("failure: %v", f)

	// A worker arrives; the same id re-attaches and gets the result. Its
	// handler streams for longer than the window, with progress all along.
	jetruntest.StartWorker(t, rt, worker.Config{RowSyncInterval: 20 * time.Millisecond}, func(w *worker.Worker) {
		w.HandleFunc("later", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for i := range 12 { // 1.2 s: longer than the window
				if err := run.Chunk(ctx, i); err != nil {
					return worker.Result{}, err
				}
				if err := run.Flush(ctx); err != nil {
					return worker.Result{}, err
				}
				time.Sleep(100 * time.Millisecond) // the handler's own work
			}
			return worker.Result{Summary: "done"}, nil
		})
	})
	res, err := c.Run(ctx, parent.Request{AgentType: "later", RunID: "q1", Input: 1})
	if err != nil || res.Summary != "done" {
		t.Fatalf("re-attached run: %+v, %v", res, err)
	}
}

// Past the caller's window the run is given up and its child stopped; the
// same id, run again, resumes it as a new attempt that keeps its
// milestones, exactly once when two callers retry at the same moment.
func TestWindowExceededThenRetryResumesOnce(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	ctx := t.Context()
	var (
		mu      sync.Mutex
		starts  []int // attempts started
		release = make(chan struct{})
	)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("slow", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			mu.Lock()
			starts = append(starts, run.Attempt())
			mu.Unlock()
			if len(run.Milestones()) == 0 {
				if _, err := run.Milestone(ctx, "half", nil); err != nil {
					return worker.Result{}, err
				}
			}
			select {
			case <-release:
				return worker.Result{Summary: "resumed after " + run.Milestones()[0].Name}, nil
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
		})
	})
	impatient, err := parent.New(rt, parent.Config{ReattachMaxWindow: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = impatient.Run(ctx, parent.Request{AgentType: "slow", RunID: "win", Input: 1})
	var f *parent.Failure
	ok := errors.As(err, &f)
	if !ok || f.Status != events.StatusInterrupted || f.Reason != events.ReasonWindowExceeded || f.ChildStillRunning || !f.Retryable {
		t.Fatalf("await past the window: %v", err)
	}
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "win", 10*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusInterrupted && !r.ChildStillRunning
	})
	if row.Reason != events.ReasonWindowExceeded || row.Attempt != 1 {
		t.Fatalf("row after the window: %+v", row)
	}

	// Two callers retry at once: one new attempt.
	patient, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]*parent.Result, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			results[i], errs[i] = patient.Run(ctx, parent.Request{AgentType: "slow", RunID: "win", Input: 1})
		})
	}
	jetruntest.WaitRow(t, engine.From(rt).Store(), "win", 10*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusRunning && r.Attempt == 2
	})
	close(release)
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || results[i].Summary != "resumed after half" {
			t.Fatalf("retry %d: %+v, %v", i, results[i], errs[i])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 || starts[0] != 1 || starts[1] != 2 {
		t.Fatalf("attempts started: %v, want [1 2]", starts)
	}
	final, _ := patient.Inspect(ctx, "win")
	if final.Status != events.StatusCompleted || final.Milestones != 1 || final.Attempt != 2 {
		t.Fatalf("final row: %+v", final)
	}
}

// A run that awaits a child of its own agent type parks: at concurrency 1
// the worker gives the parent's slot to the child, and both complete.
func TestSelfDelegationAtConcurrencyOne(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	ctx := t.Context()
	var c *parent.Client
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{Concurrency: 1}, func(w *worker.Worker) {
		w.HandleFunc("self", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if run.Depth() > 0 {
				return worker.Result{Summary: "child done"}, nil
			}
			var child *parent.Result
			err := run.Park(ctx, func(ctx context.Context) (err error) {
				child, err = c.Run(ctx, parent.Request{AgentType: "self", RunID: run.ID() + "-child", Parent: run.ID(), Depth: 1, Input: 1})
				return err
			})
			if err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: "parent after " + child.Summary}, nil
		})
	})
	var err error
	if c, err = parent.New(rt, parent.Config{}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(ctx, parent.Request{AgentType: "self", RunID: "selfie", Input: 1})
	if err != nil || res.Summary != "parent after child done" {
		t.Fatalf("self-delegation: %+v, %v", res, err)
	}
}

// A short window is honoured, not rounded up to the Await's periodic read
// of its row (issue 23: a 1 s window gave up after 5 s): the caller's
// deadline here ends before that read would come.
func TestShortWindowGivesUpOnTime(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("silent", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-ctx.Done() // no progress, no status event until it is stopped
			return worker.Result{}, context.Cause(ctx)
		})
	})
	c, err := parent.New(rt, parent.Config{ReattachMaxWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3500*time.Millisecond)
	defer cancel()
	_, err = c.Run(ctx, parent.Request{AgentType: "silent", RunID: "short", Input: 1})
	var f *parent.Failure
	if !errors.As(err, &f) || f.Reason != events.ReasonWindowExceeded {
		t.Fatalf("await with a 1 s window: %v; want given up, window-exceeded, before the caller's deadline", err)
	}
}

// A retry whose writer published its dispatch and died before recording
// it is found by the next Dispatch of the run in the dedup window, under
// the retry's own message id: not published a second time.
func TestDispatchFindsARetrysUnrecordedDispatch(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx := t.Context()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	c, err := parent.New(rt, parent.Config{ReattachMaxWindow: 300 * time.Millisecond, AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	const id = "retry-unrecorded"
	req := parent.Request{AgentType: "unserved", RunID: id, Input: struct{}{}} // no worker: dispatches stay queued
	if _, err := c.Run(ctx, req); err == nil {
		t.Fatal("an unserved run completed")
	}
	store := engine.From(rt).Store()
	row := jetruntest.WaitRow(t, store, id, 30*time.Second, func(r *model.Row) bool {
		return r.Status == events.StatusInterrupted && !r.ChildStillRunning
	})
	stream, err := js.Stream(ctx, wire.Namespace("").DispatchStream())
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, first.State.LastSeq); err != nil { // as a worker that took it would
		t.Fatalf("delete the first dispatch: %v", err)
	}
	// The retry's writer resumes the row, publishes its dispatch and dies
	// before recording it on the row.
	next, resumed, err := engine.From(rt).Resume(ctx, row, false)
	if err != nil || !resumed {
		t.Fatalf("resume: %v, resumed %v", err, resumed)
	}
	if _, err := engine.From(rt).PublishDispatch(ctx, req.AgentType, next.Dispatch(),
		engine.DispatchOptions{MsgID: next.DispatchMsgID()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d dispatches queued for one retry", info.State.Msgs)
	}
}
