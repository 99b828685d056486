package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/pkg/worker"
)

// traceAnswer is what the tests read of GET /v1/runs/{id}/trace.
type traceAnswer struct {
	RunID string `json:"runId"`
	Runs  []struct {
		ID         string    `json:"id"`
		Parent     string    `json:"parent"`
		Level      int       `json:"level"`
		Status     string    `json:"status"`
		StartedAt  time.Time `json:"startedAt"`
		FinishedAt time.Time `json:"finishedAt"`
		Usage      *struct {
			InputTokens int64 `json:"inputTokens"`
			CostMicros  int64 `json:"costMicros"`
		} `json:"usage"`
		Steps []struct {
			Name    string `json:"name"`
			Bytes   int    `json:"bytes"`
			Preview string `json:"preview"`
		} `json:"steps"`
	} `json:"runs"`
	Totals struct {
		InputTokens  int64 `json:"inputTokens"`
		OutputTokens int64 `json:"outputTokens"`
		CostMicros   int64 `json:"costMicros"`
		Runs         int   `json:"runs"`
		Steps        int   `json:"steps"`
	} `json:"totals"`
	Truncated bool `json:"truncated"`
	MaxRuns   int  `json:"maxRuns"`
}

// treeAgents registers "planner", which stores a step, reports usage and
// runs kids (its input) "leaf" children one after the other, and "leaf",
// which does the same without children.
func treeAgents(w *worker.Worker) {
	work := func(ctx context.Context, run *worker.Run, step string, tokens int64) error {
		if _, err := run.Step(ctx, step, func(context.Context) (any, error) { return map[string]string{"did": step}, nil }); err != nil {
			return err
		}
		return run.Usage(ctx, worker.Usage{InputTokens: tokens, OutputTokens: 1, CostMicros: 10 * tokens, Model: "m"})
	}
	w.HandleFunc("planner", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		if err := work(ctx, run, "plan", 100); err != nil {
			return worker.Result{}, err
		}
		var kids int
		if err := json.Unmarshal(run.Input(), &kids); err != nil {
			return worker.Result{}, err
		}
		for i := range kids {
			if _, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "leaf", CallID: fmt.Sprintf("k%d", i), Input: i}); err != nil {
				return worker.Result{}, err
			}
		}
		return worker.Result{Summary: "planned"}, nil
	})
	w.HandleFunc("leaf", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		return worker.Result{}, work(ctx, run, "search", 10)
	})
	w.HandleFunc("wordy", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		_, err := run.Step(ctx, "essay", func(context.Context) (any, error) { return strings.Repeat("é", 500), nil })
		return worker.Result{}, err
	})
	w.HandleFunc("busy", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		for i := range httpapi.MaxTraceSteps + 1 {
			if _, err := run.Step(ctx, fmt.Sprintf("s-%d", i), func(context.Context) (any, error) { return i, nil }); err != nil {
				return worker.Result{}, err
			}
		}
		return worker.Result{}, nil
	})
}

// GET /v1/runs/{id}/trace answers the run's tree depth first, each run
// with its times, status, usage and steps, and the totals over them.
func TestTraceAnswersTheTree(t *testing.T) {
	t.Parallel()
	b := setupServing(t, nil, treeAgents)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs?wait=true", `{"agentType":"planner","runId":"tr1","input":2}`, nil), 200)
	var tr traceAnswer
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/tr1/trace", "", &tr), 200)
	if tr.RunID != "tr1" || len(tr.Runs) != 3 || tr.Truncated || tr.MaxRuns != httpapi.MaxTraceRuns {
		t.Fatalf("trace %+v", tr)
	}
	for i, r := range tr.Runs {
		wantStep, wantLevel, wantTokens := "search", 1, int64(10)
		if i == 0 {
			wantStep, wantLevel, wantTokens = "plan", 0, 100
		}
		if r.Status != "completed" || r.Level != wantLevel || r.StartedAt.IsZero() || r.FinishedAt.Before(r.StartedAt) ||
			r.Usage == nil || r.Usage.InputTokens != wantTokens || len(r.Steps) != 1 || r.Steps[0].Name != wantStep || r.Steps[0].Bytes == 0 ||
			r.Steps[0].Preview != `{"did":"`+wantStep+`"}` {
			t.Fatalf("run %d of the trace: %+v", i, r)
		}
		if i > 0 && r.Parent != "tr1" {
			t.Fatalf("run %d has parent %q", i, r.Parent)
		}
	}
	if got := tr.Totals; got.InputTokens != 120 || got.OutputTokens != 3 || got.CostMicros != 1200 || got.Runs != 3 || got.Steps != 3 {
		t.Fatalf("totals %+v", got)
	}
	var e struct{ Code string }
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/nosuch/trace", "", &e), 404)
	if e.Code != "not_found" {
		t.Fatalf("unknown run: %+v", e)
	}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/bad..id/trace", "", nil), 404)
}

// A tree bigger than the cap, or a run with more steps, is cut at the cap,
// and the answer says so.
func TestTraceIsCappedAndSaysSo(t *testing.T) {
	t.Parallel()
	b := setupConfig(t, func(c *httpapi.Config) { c.MaxTraceRuns = 3 }, treeAgents)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs?wait=true", `{"agentType":"planner","runId":"tr2","input":4}`, nil), 200)
	var tr traceAnswer
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/tr2/trace", "", &tr), 200)
	if len(tr.Runs) != 3 || !tr.Truncated || tr.MaxRuns != 3 || tr.Totals.Runs != 3 {
		t.Fatalf("capped trace: %d runs, truncated %v, maxRuns %d, totals %+v", len(tr.Runs), tr.Truncated, tr.MaxRuns, tr.Totals)
	}
	// A run with more steps than MaxTraceSteps shows the first ones.
	wantStatus(t, do(t, "POST", b.url+"/v1/runs?wait=true", `{"agentType":"busy","runId":"tr3","input":1}`, nil), 200)
	tr = traceAnswer{}
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/tr3/trace", "", &tr), 200)
	if len(tr.Runs) != 1 {
		t.Fatalf("trace of a lone run: %d runs", len(tr.Runs))
	}
	if steps := tr.Runs[0].Steps; len(steps) != httpapi.MaxTraceSteps || steps[0].Name != "s-0" || !tr.Truncated {
		t.Fatalf("a run of %d steps: %d steps in its trace, truncated %v", httpapi.MaxTraceSteps+1, len(steps), tr.Truncated)
	}
}

// A step's preview in the trace is its output's JSON, cut at a character
// boundary with "…" when longer than httpapi.StepPreviewBytes.
func TestTraceStepPreviewIsCut(t *testing.T) {
	t.Parallel()
	b := setupServing(t, nil, treeAgents)
	wantStatus(t, do(t, "POST", b.url+"/v1/runs?wait=true", `{"agentType":"wordy","runId":"tr4","input":1}`, nil), 200)
	var tr traceAnswer
	wantStatus(t, do(t, "GET", b.url+"/v1/runs/tr4/trace", "", &tr), 200)
	if len(tr.Runs) != 1 || len(tr.Runs[0].Steps) != 1 {
		t.Fatalf("trace %+v", tr)
	}
	p := tr.Runs[0].Steps[0].Preview
	body, ok := strings.CutSuffix(p, "…")
	if !ok || !utf8.ValidString(p) || len(body) > httpapi.StepPreviewBytes || !strings.HasPrefix(body, `"éé`) ||
		strings.Trim(body, `"é`) != "" || len(body) < httpapi.StepPreviewBytes-1 {
		t.Fatalf("preview of a 1,000-byte output: %q (%d bytes)", p, len(p))
	}
}
