package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/rerun"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// modelSteps serves "steps8": eight steps whose outputs name the input's
// model, each spending 10 tokens and 100 micros; ran records which step
// bodies executed per run. "hold" waits until release is closed.
type modelSteps struct {
	mu      sync.Mutex
	ran     map[string][]string
	release chan struct{}
}

func (m *modelSteps) executed(id string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ran[id])
}

func (m *modelSteps) register(w *worker.Worker) {
	w.HandleFunc("steps8", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var in struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(run.Input(), &in)
		var outs []string
		for n := 1; n <= 8; n++ {
			name := fmt.Sprintf("s%d", n)
			out, err := worker.Step(ctx, run, name, func(ctx context.Context) (string, error) {
				m.mu.Lock()
				m.ran[run.ID()] = append(m.ran[run.ID()], name)
				m.mu.Unlock()
				err := run.Usage(ctx, worker.Usage{InputTokens: 8, OutputTokens: 2, CostMicros: 100, Model: in.Model})
				return name + " by " + in.Model, err
			})
			if err != nil {
				return worker.Result{}, err
			}
			outs = append(outs, out)
		}
		return worker.Result{Output: outs}, nil
	})
	w.HandleFunc("hold", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		select {
		case <-m.release:
			return worker.Result{}, nil
		case <-ctx.Done():
			return worker.Result{}, ctx.Err()
		}
	})
}

func rerunSetup(t *testing.T) (*bundle, *modelSteps) {
	t.Helper()
	m := &modelSteps{ran: map[string][]string{}, release: make(chan struct{})}
	t.Cleanup(func() { close(m.release) })
	return setupServing(t, nil, m.register), m
}

func (b *bundle) completed(t *testing.T, id string) {
	t.Helper()
	row := jetruntest.WaitRow(t, b.store, id, 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("run %s: %s %s", id, row.Status, row.Error)
	}
}

// POST /v1/runs/{id}:rerun starts a run that executes the steps from
// fromStep only, its row saying what it was given; GET
// /v1/runs/{a}/diff/{b} says which steps changed and what each side spent.
func TestRerunAndDiffOverHTTP(t *testing.T) {
	t.Parallel()
	b, m := rerunSetup(t)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"steps8","runId":"base","input":{"model":"m1"}}`, nil), 201)
	b.completed(t, "base")

	var run struct {
		ID         string `json:"id"`
		ForkedFrom struct {
			RunID string   `json:"runId"`
			Step  string   `json:"step"`
			Given []string `json:"given"`
		} `json:"forkedFrom"`
	}
	resp := do(t, "POST", b.url+"/v1/runs/base:rerun", `{"fromStep":"s5","input":{"model":"m2"},"runId":"base-m2"}`, &run)
	wantStatus(t, resp, 201)
	if run.ID != "base-m2" || run.ForkedFrom.RunID != "base" || run.ForkedFrom.Step != "s5" ||
		!slices.Equal(run.ForkedFrom.Given, []string{"s1", "s2", "s3", "s4"}) {
		t.Fatalf("re-run answered %+v", run)
	}
	b.completed(t, "base-m2")
	got := m.executed("base-m2")
	t.Logf("re-run from s5 executed %d steps: %v", len(got), got)
	if !slices.Equal(got, []string{"s5", "s6", "s7", "s8"}) {
		t.Errorf("re-run executed %v, want s5..s8", got)
	}

	var d rerun.Diff
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/base/diff/base-m2", "", &d), 200)
	var verdicts []string
	for _, s := range d.Steps {
		verdicts = append(verdicts, s.Name+"="+s.Verdict)
	}
	want := []string{"s1=equal", "s2=equal", "s3=equal", "s4=equal", "s5=changed", "s6=changed", "s7=changed", "s8=changed"}
	if !slices.Equal(verdicts, want) || d.Equal != 4 || d.Changed != 4 || d.OutputEqual {
		t.Errorf("diff steps %v (equal %d changed %d outputEqual %v)", verdicts, d.Equal, d.Changed, d.OutputEqual)
	}
	if d.Steps[0].B.Given != "base" || d.Steps[4].A.Usage.CostMicros != 100 || d.Steps[4].B.Usage.CostMicros != 100 ||
		string(d.Steps[4].B.Output) != `"s5 by m2"` {
		t.Errorf("diff sides: s1 %+v, s5 %+v / %+v", d.Steps[0].B, d.Steps[4].A, d.Steps[4].B)
	}
	if d.Totals.A.CostMicros != 800 || d.Totals.B.CostMicros != 400 || d.Totals.Delta.CostMicros != -400 {
		t.Errorf("diff totals %+v", d.Totals)
	}
}

// Bad re-runs get the API's error shape and create nothing: an unknown
// run 404, a live run 409, a step never stored 422 listing the steps the
// run has.
func TestRerunBadRequestsOverHTTP(t *testing.T) {
	t.Parallel()
	b, _ := rerunSetup(t)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"steps8","runId":"done","input":{"model":"m"}}`, nil), 201)
	b.completed(t, "done")
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"hold","runId":"busy","input":1}`, nil), 201)
	jetruntest.WaitRow(t, b.store, "busy", 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })

	var e struct {
		Error string   `json:"error"`
		Code  string   `json:"code"`
		Steps []string `json:"steps"`
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/nobody:rerun", `{"fromStep":"s1"}`, &e), 404)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/busy:rerun", `{"fromStep":"s1"}`, &e), 409)
	if e.Code != "run_live" {
		t.Errorf("live: %+v", e)
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/done:rerun", `{"fromStep":"s9","runId":"never"}`, &e), 422)
	if e.Code != "step_not_stored" || len(e.Steps) != 8 || e.Steps[0] != "s1" || !strings.Contains(e.Error, `"s9"`) {
		t.Errorf("unknown step: %+v", e)
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/done:rerun", `{"fromStep":`, nil), 400)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs/done:undo", `{}`, nil), 404)
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/done/diff/nobody", "", nil), 404)
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/never", "", nil), 404)
}

// POST /v1/runs:rerun re-runs the runs of an agent type with an input
// override, at most maxRuns of them, and answers one table: which outputs
// changed, what the re-runs cost; a budget spent skips the rest.
func TestBatchRerunOverHTTP(t *testing.T) {
	t.Parallel()
	b, m := rerunSetup(t)
	for i := range 3 {
		wantStatus(t, do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(`{"agentType":"steps8","runId":"b%d","input":{"model":"m1"}}`, i), nil), 201)
		b.completed(t, fmt.Sprintf("b%d", i))
	}
	var res rerun.BatchResult
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:rerun",
		`{"agentType":"steps8","statuses":["completed"],"fromStep":"s7","set":{"input.model":"m3"},"maxRuns":2}`, &res), 200)
	if res.Matched != 3 || res.Rerun != 2 || res.Changed != 2 || len(res.Runs) != 2 || res.Usage.CostMicros != 400 {
		t.Fatalf("batch: %+v", res)
	}
	for _, br := range res.Runs {
		if !slices.Equal(br.ChangedSteps, []string{"s7", "s8"}) || !br.OutputChanged || br.Usage.CostMicros != 200 {
			t.Errorf("batch run %+v", br)
		}
		if got := m.executed(br.RerunID); !slices.Equal(got, []string{"s7", "s8"}) {
			t.Errorf("batch re-run %s executed %v", br.RerunID, got)
		}
	}
	// A budget of 250 micros: the first re-run spends 200, the second is
	// stopped by what is left (50), the third never starts.
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:rerun",
		`{"agentType":"steps8","statuses":["completed"],"fromStep":"s7","set":{"input.model":"m4"},"maxRuns":3,"budget":{"costMicros":250}}`, &res), 200)
	if res.Rerun != 2 || len(res.Runs) != 3 || res.Runs[2].Skipped == "" || res.Runs[1].Status != events.StatusInterrupted {
		t.Errorf("budgeted batch: %+v", res)
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:rerun", `{"agentType":"steps8","fromStep":"s7","statuses":["running"]}`, nil), 400)
}

// A batch without a budget re-runs its runs side by side: three re-runs
// at concurrency 3 each wait in their step until all three are in it, so
// one at a time would never get past the first.
func TestBatchRerunRunsSideBySide(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inside, all := 0, make(chan struct{})
	b := setupServing(t, nil, func(w *worker.Worker) {
		w.HandleFunc("meet", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var in struct {
				Meet int `json:"meet"`
			}
			_ = json.Unmarshal(run.Input(), &in)
			if _, err := worker.Step(ctx, run, "s1", func(context.Context) (string, error) { return "planned", nil }); err != nil {
				return worker.Result{}, err
			}
			out, err := worker.Step(ctx, run, "s2", func(ctx context.Context) (string, error) {
				if in.Meet == 0 {
					return "alone", nil
				}
				mu.Lock()
				if inside++; inside == in.Meet {
					close(all)
				}
				mu.Unlock()
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				select {
				case <-all:
					return "met", nil
				case <-ctx.Done():
					return "", fmt.Errorf("the other re-runs never came: %w", ctx.Err())
				}
			})
			return worker.Result{Summary: out}, err
		})
	})
	for i := range 3 {
		wantStatus(t, do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(`{"agentType":"meet","runId":"m%d","input":{"meet":0}}`, i), nil), 201)
		b.completed(t, fmt.Sprintf("m%d", i))
	}
	var res rerun.BatchResult
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:rerun",
		`{"agentType":"meet","fromStep":"s2","set":{"input.meet":3},"concurrency":3}`, &res), 200)
	if res.Rerun != 3 || res.Changed != 0 || len(res.Runs) != 3 {
		t.Fatalf("batch: %+v", res)
	}
	for _, br := range res.Runs {
		if br.Status != events.StatusCompleted || !slices.Equal(br.ChangedSteps, []string{"s2"}) {
			t.Errorf("batch run %+v", br)
		}
	}
	wantStatus(t, do(t, "POST", b.url+"/v1/runs:rerun",
		`{"agentType":"meet","fromStep":"s2","concurrency":2,"budget":{"tokens":10}}`, nil), 400)
}

// POST /v1/runs:rerun selects its runs by status and by creation time as
// well as by agent type: a status none has, or a time range none was
// created in, re-runs nothing; a range around their creation selects them.
func TestBatchRerunSelectsByStatusAndTime(t *testing.T) {
	t.Parallel()
	b, m := rerunSetup(t)
	before := time.Now().UTC().Add(-time.Minute)
	for i := range 2 {
		wantStatus(t, do(t, "POST", b.url+"/v1/runs", fmt.Sprintf(`{"agentType":"steps8","runId":"sel%d","input":{"model":"m1"}}`, i), nil), 201)
		b.completed(t, fmt.Sprintf("sel%d", i))
	}
	after := time.Now().UTC().Add(time.Minute)
	stamp := func(t time.Time) string { return t.Format(time.RFC3339Nano) }
	for _, tc := range []struct {
		filter  string
		matched int
	}{
		{`"statuses":["error"]`, 0},
		{`"since":"` + stamp(after) + `"`, 0},
		{`"until":"` + stamp(before) + `"`, 0},
		{`"statuses":["completed"],"since":"` + stamp(before) + `","until":"` + stamp(after) + `"`, 2},
	} {
		var res rerun.BatchResult
		wantStatus(t, do(t, "POST", b.url+"/v1/runs:rerun", `{"agentType":"steps8","fromStep":"s8","maxRuns":1,`+tc.filter+`}`, &res), 200)
		if res.Matched != tc.matched || res.Rerun != min(tc.matched, 1) {
			t.Errorf("batch selecting %s: matched %d, re-ran %d; want %d matched", tc.filter, res.Matched, res.Rerun, tc.matched)
		}
		for _, br := range res.Runs {
			if got := m.executed(br.RerunID); !slices.Equal(got, []string{"s8"}) {
				t.Errorf("batch re-run %s executed %v", br.RerunID, got)
			}
		}
	}
}
