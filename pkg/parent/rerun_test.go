package parent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// stepCounter is an eight-step Go handler whose step bodies record, per
// run, which steps they executed; step s3 runs a nested run as its work.
type stepCounter struct {
	mu   sync.Mutex
	ran  map[string][]string // run id -> steps whose body ran
	seen map[string][]string // run id -> the outputs its handler got, in order
}

func newStepCounter() *stepCounter {
	return &stepCounter{ran: map[string][]string{}, seen: map[string][]string{}}
}

func (s *stepCounter) executed(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ran[id])
}

func (s *stepCounter) outputs(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen[id])
}

func (s *stepCounter) ServeRun(ctx context.Context, run *worker.Run) (worker.Result, error) {
	var in struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(run.Input(), &in)
	var outs []string
	for n := 1; n <= 8; n++ {
		name := fmt.Sprintf("s%d", n)
		out, err := worker.Step(ctx, run, name, func(ctx context.Context) (string, error) {
			s.mu.Lock()
			s.ran[run.ID()] = append(s.ran[run.ID()], name)
			s.mu.Unlock()
			if n == 3 { // a nested run as a step's work
				res, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "leaf", Input: map[string]int{"n": n}})
				if err != nil {
					return "", err
				}
				return "nested " + string(res.Output), nil
			}
			if err := run.Usage(ctx, worker.Usage{InputTokens: 100, OutputTokens: 10, CostMicros: 1000, Model: in.Model}); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s by %s", name, in.Model), nil
		})
		if err != nil {
			return worker.Result{}, err
		}
		outs = append(outs, out)
	}
	s.mu.Lock()
	s.seen[run.ID()] = outs
	s.mu.Unlock()
	return worker.Result{Summary: "eight steps", Output: outs}, nil
}

// rerunEnv starts a worker serving "eight" (stepCounter) and "leaf" (a
// nested run counting its executions).
func rerunEnv(t *testing.T) (*jetruntest.Env, *stepCounter, *int64) {
	t.Helper()
	e := jetruntest.NewEnv(t)
	h := newStepCounter()
	var leaves int64
	var mu sync.Mutex
	e.StartWorker(t, worker.Config{ID: "w-rerun"}, func(w *worker.Worker) {
		w.Handle("eight", h)
		w.HandleFunc("leaf", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			mu.Lock()
			leaves++
			mu.Unlock()
			return worker.Result{Output: "leaf"}, nil
		})
	})
	return e, h, &leaves
}

func awaitCompleted(t *testing.T, e *jetruntest.Env, id string) *model.Row {
	t.Helper()
	row := jetruntest.WaitRow(t, e.Store, id, 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("run %s: %s %s", id, row.Status, row.Error)
	}
	return row
}

func stepNames(n, m int) []string {
	var out []string
	for i := n; i <= m; i++ {
		out = append(out, fmt.Sprintf("s%d", i))
	}
	return out
}

// An eight-step run re-run from step s5 executes s5..s8 only (counted by
// the step bodies), gets s1..s4 back as stored (the nested run s3 ran is
// not run again), is charged only for what it executed, and says on its
// row what it was given; the original row is not changed. A re-run of the
// re-run from s7 executes s7 and s8 only.
func TestRerunFromAStepExecutesOnlyTheStepsFromIt(t *testing.T) {
	t.Parallel()
	e, h, leaves := rerunEnv(t)
	ctx := context.Background()
	if _, err := e.Client.Dispatch(ctx, parent.Request{AgentType: "eight", RunID: "orig", Input: map[string]string{"model": "m1"}}); err != nil {
		t.Fatal(err)
	}
	orig := awaitCompleted(t, e, "orig")
	_, origRev, err := e.Store.Get(ctx, "orig")
	if err != nil {
		t.Fatal(err)
	}
	if got := h.executed("orig"); !slices.Equal(got, stepNames(1, 8)) {
		t.Fatalf("original executed %v", got)
	}

	d, err := e.Client.Rerun(ctx, "orig", parent.RerunRequest{FromStep: "s5", RunID: "fork1", Input: map[string]string{"model": "m2"}})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Created || d.Run.ForkedFrom == nil || d.Run.ForkedFrom.RunID != "orig" || d.Run.ForkedFrom.Step != "s5" {
		t.Fatalf("re-run answered %+v (forkedFrom %+v)", d, d.Run.ForkedFrom)
	}
	fork := awaitCompleted(t, e, "fork1")
	got := h.executed("fork1")
	t.Logf("re-run from s5 executed %d steps: %v", len(got), got)
	if !slices.Equal(got, stepNames(5, 8)) {
		t.Errorf("re-run from s5 executed %v, want s5..s8", got)
	}
	if *leaves != 1 {
		t.Errorf("the nested run of step s3 ran %d times, want once (the original's)", *leaves)
	}
	outs := h.outputs("fork1")
	if outs[0] != "s1 by m1" || outs[3] != "s4 by m1" || outs[4] != "s5 by m2" || outs[7] != "s8 by m2" {
		t.Errorf("re-run's handler got %v", outs)
	}
	if !slices.Equal(fork.ForkedFrom.Given, stepNames(1, 4)) {
		t.Errorf("row's forkedFrom %+v, want s1..s4 given", fork.ForkedFrom)
	}
	// Charged only for s5..s8: 4 of the original's 7 paid steps.
	if fork.Usage == nil || fork.Usage.CostMicros != 4000 || orig.Usage.CostMicros != 7000 {
		t.Errorf("usage: re-run %+v, original %+v; want 4000 and 7000 cost micros", fork.Usage, orig.Usage)
	}
	steps, err := e.Client.Steps(ctx, "fork1")
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		given := i < 4
		if st.Name != fmt.Sprintf("s%d", i+1) || (st.GivenFrom == "orig") != given || (st.Usage == nil) != (given || st.Name == "s3") {
			t.Errorf("re-run's step %d: %s givenFrom %q usage %+v", i, st.Name, st.GivenFrom, st.Usage)
		}
	}
	if _, rev, err := e.Store.Get(ctx, "orig"); err != nil || rev != origRev {
		t.Errorf("the original's row changed: revision %d -> %d (%v)", origRev, rev, err)
	}

	// A fork of the fork, with an output override.
	d2, err := e.Client.Rerun(ctx, "fork1", parent.RerunRequest{FromStep: "s7", RunID: "fork2",
		Steps: map[string]any{"s2": "s2 overridden"}})
	if err != nil {
		t.Fatal(err)
	}
	fork2 := awaitCompleted(t, e, d2.Run.ID)
	if got := h.executed("fork2"); !slices.Equal(got, stepNames(7, 8)) {
		t.Errorf("re-run of the re-run from s7 executed %v, want s7, s8", got)
	}
	t.Logf("re-run of the re-run from s7 executed %d steps: %v", len(h.executed("fork2")), h.executed("fork2"))
	if outs := h.outputs("fork2"); outs[1] != "s2 overridden" || outs[4] != "s5 by m2" || outs[6] != "s7 by m2" {
		t.Errorf("fork of the fork's handler got %v", outs)
	}
	if f := fork2.ForkedFrom; f.RunID != "fork1" || !slices.Equal(f.Given, stepNames(1, 6)) || !slices.Equal(f.Overridden, []string{"s2"}) {
		t.Errorf("fork of the fork: forkedFrom %+v", f)
	}
	// A retry (no fromStep) is given every stored step: it executes none.
	retry, err := e.Client.Rerun(ctx, "fork1", parent.RerunRequest{RunID: "retry1"})
	if err != nil {
		t.Fatal(err)
	}
	awaitCompleted(t, e, retry.Run.ID)
	if got := h.executed("retry1"); len(got) != 0 || !slices.Equal(h.outputs("retry1"), h.outputs("fork1")) {
		t.Errorf("a retry executed %v and got %v", got, h.outputs("retry1"))
	}
	// The same re-run again: the same run, not a second one.
	again, err := e.Client.Rerun(ctx, "fork1", parent.RerunRequest{FromStep: "s7", RunID: "fork2"})
	if err != nil || again.Created || again.Run.ID != "fork2" {
		t.Errorf("the same re-run again: %+v, %v", again, err)
	}
	if _, err := e.Client.Rerun(ctx, "fork1", parent.RerunRequest{FromStep: "s6", RunID: "fork2"}); !errors.Is(err, parent.ErrRunIDTaken) {
		t.Errorf("another re-run under a taken id: %v, want ErrRunIDTaken", err)
	}
}

// Bad re-runs are refused with a clear error and change nothing: an
// unknown run, a run still live, a step the run never stored (listing the
// steps it has), an override of a step not given.
func TestRerunRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e, _, _ := rerunEnv(t)
	g := &gated{runs: map[string]int{}, gates: map[string]chan struct{}{}}
	e.StartWorker(t, worker.Config{ID: "w-gated"}, func(w *worker.Worker) { w.Handle("gated", g) })
	ctx := context.Background()
	if _, err := e.Client.Dispatch(ctx, parent.Request{AgentType: "eight", RunID: "done", Input: map[string]string{"model": "m"}}); err != nil {
		t.Fatal(err)
	}
	awaitCompleted(t, e, "done")
	if _, err := e.Client.Dispatch(ctx, parent.Request{AgentType: "gated", RunID: "live", Input: 1}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, e.Store, "live", 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })

	if _, err := e.Client.Rerun(ctx, "nobody", parent.RerunRequest{FromStep: "s1"}); !errors.Is(err, parent.ErrRunNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	if _, err := e.Client.Rerun(ctx, "live", parent.RerunRequest{}); !errors.Is(err, parent.ErrRunLive) {
		t.Errorf("live run: %v", err)
	}
	_, err := e.Client.Rerun(ctx, "done", parent.RerunRequest{FromStep: "s9", RunID: "never"})
	var nse *parent.StepNotStoredError
	if !errors.As(err, &nse) || nse.Step != "s9" || !slices.Equal(nse.Stored, stepNames(1, 8)) {
		t.Errorf("unknown step: %v", err)
	}
	t.Logf("unknown step: %v", err)
	if _, err := e.Client.Rerun(ctx, "done", parent.RerunRequest{FromStep: "s3", RunID: "never", Steps: map[string]any{"s5": 1}}); !errors.Is(err, parent.ErrStepNotStored) {
		t.Errorf("override of a step not given: %v", err)
	}
	if _, err := e.Client.Rerun(ctx, "done", parent.RerunRequest{FromStep: "s3", RunID: "bad.id"}); !errors.Is(err, parent.ErrBadRequest) {
		t.Errorf("bad run id: %v", err)
	}
	if ok, err := jetruntest.HasRun(ctx, e.Client, "never"); ok || err != nil {
		t.Errorf("a refused re-run left a run: %v %v", ok, err)
	}
	close(g.gate("live"))
}

// Two re-runs asked at once under one run id, from different steps: one
// wins the id, the other is refused with ErrRunIDTaken, and the winner
// executes exactly the steps from its own fromStep (none of the loser's
// steps were stored under the id).
func TestConcurrentRerunsUnderOneIDGiveOnlyTheWinnersSteps(t *testing.T) {
	t.Parallel()
	e, h, _ := rerunEnv(t)
	ctx := context.Background()
	if _, err := e.Client.Dispatch(ctx, parent.Request{AgentType: "eight", RunID: "src", Input: map[string]string{"model": "m"}}); err != nil {
		t.Fatal(err)
	}
	awaitCompleted(t, e, "src")
	for round := range 5 {
		id := fmt.Sprintf("same-%d", round)
		froms := []string{"s3", "s7"}
		errs := make([]error, len(froms))
		var wg sync.WaitGroup
		for i, from := range froms {
			wg.Go(func() {
				_, errs[i] = e.Client.Rerun(ctx, "src", parent.RerunRequest{FromStep: from, RunID: id})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner < 0:
				winner = i
			case errors.Is(err, parent.ErrRunIDTaken):
			default:
				t.Fatalf("round %d: re-run from %s: %v", round, froms[i], err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: both refused: %v", round, errs)
		}
		awaitCompleted(t, e, id)
		n := int(froms[winner][1] - '0')
		if got := h.executed(id); !slices.Equal(got, stepNames(n, 8)) {
			t.Errorf("round %d: the re-run from %s executed %v", round, froms[winner], got)
		}
	}
}

// A re-run of a run with more steps than a row lists names the first
// jetruntype.MaxForkGiven steps given back and counts them all; an
// override of a step past that list is still given.
func TestRerunOfAManyStepRunCapsTheNamesOnItsRow(t *testing.T) {
	t.Parallel()
	e := jetruntest.NewEnv(t)
	ctx := context.Background()
	n := jetruntype.MaxForkGiven + 50
	e.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("many", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var last string
			for i := 1; i <= n; i++ {
				out, err := worker.Step(ctx, run, fmt.Sprintf("s%d", i), func(context.Context) (string, error) {
					return fmt.Sprintf("ran s%d in %s", i, run.ID()), nil
				})
				if err != nil {
					return worker.Result{}, err
				}
				last = out
			}
			return worker.Result{Summary: last}, nil
		})
	})
	if _, err := e.Client.Dispatch(ctx, parent.Request{AgentType: "many", RunID: "long", Input: map[string]int{}}); err != nil {
		t.Fatal(err)
	}
	awaitCompleted(t, e, "long")
	last := fmt.Sprintf("s%d", n)
	d, err := e.Client.Rerun(ctx, "long", parent.RerunRequest{FromStep: last, RunID: "long-2",
		Steps: map[string]any{fmt.Sprintf("s%d", n-1): "overridden"}})
	if err != nil {
		t.Fatal(err)
	}
	f := d.Run.ForkedFrom
	if f == nil || len(f.Given) != jetruntype.MaxForkGiven || f.GivenCount != n-1 || f.Given[0] != "s1" ||
		!slices.Equal(f.Overridden, []string{fmt.Sprintf("s%d", n-1)}) {
		t.Fatalf("forkedFrom: %d names, count %d, overridden %v", len(f.Given), f.GivenCount, f.Overridden)
	}
	row := awaitCompleted(t, e, "long-2")
	if row.Summary != "ran "+last+" in long-2" {
		t.Errorf("re-run's summary %q: want its last step run by it", row.Summary)
	}
	steps, err := e.Client.Steps(ctx, "long-2")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != n || string(steps[n-2].Output) != `"overridden"` || steps[n-2].GivenFrom != "long" {
		t.Errorf("re-run's steps: %d, s%d %s given from %q", len(steps), n-1, steps[n-2].Output, steps[n-2].GivenFrom)
	}
}
