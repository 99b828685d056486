package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// MaxTraceRuns bounds the runs GET /v1/runs/{id}/trace returns (the run
// itself included) unless Config.MaxTraceRuns says otherwise; MaxTraceSteps
// the steps it returns per run. A bigger tree or run is cut there, and the
// answer says so ("truncated").
const (
	MaxTraceRuns  = 200
	MaxTraceSteps = 200
)

// StepPreviewBytes bounds a trace step's preview of its output.
const StepPreviewBytes = 160

// traceBody is the answer of GET /v1/runs/{id}/trace: the run's tree of
// nested runs, depth first with siblings by creation, each with its times,
// status, usage and steps, and the totals over them.
type traceBody struct {
	RunID string     `json:"runId"`
	Runs  []traceRun `json:"runs"`
	// Totals add up the usage of the runs listed, and count them and their
	// steps.
	Totals traceTotals `json:"totals"`
	// Truncated says runs or steps were left out: more than MaxRuns runs,
	// or a run with more than MaxSteps steps.
	Truncated bool `json:"truncated"`
	MaxRuns   int  `json:"maxRuns"`
	MaxSteps  int  `json:"maxSteps"`
	// Now is the server's clock when it answered: where the bars of live
	// runs end.
	Now time.Time `json:"now"`
}

// traceRun is one run of a trace; Level is its depth under the traced run
// (0 for the run itself).
type traceRun struct {
	ID               string                  `json:"id"`
	Parent           string                  `json:"parent,omitempty"`
	ParentToolCallID string                  `json:"parentToolCallId,omitempty"`
	AgentType        string                  `json:"agentType"`
	Level            int                     `json:"level"`
	Status           events.Status           `json:"status"`
	Reason           string                  `json:"reason,omitempty"`
	Final            bool                    `json:"final"`
	CreatedAt        time.Time               `json:"createdAt"`
	StartedAt        time.Time               `json:"startedAt,omitzero"`
	FinishedAt       time.Time               `json:"finishedAt,omitzero"`
	Usage            *jetruntype.Usage       `json:"usage,omitempty"`
	TreeUsage        *jetruntype.UsageTotals `json:"treeUsage,omitempty"`
	Overrun          *jetruntype.Overrun     `json:"overrun,omitempty"`
	Steps            []traceStep             `json:"steps"`
}

// traceStep is a stored step: it ended when it was stored (At) and began
// DurationMs before (0 when unknown). Its output is not included, only its
// size and its first StepPreviewBytes (Preview), and what it spent.
type traceStep struct {
	Name       string    `json:"name"`
	At         time.Time `json:"at"`
	DurationMs int64     `json:"durationMs,omitempty"`
	Attempt    int       `json:"attempt"`
	Bytes      int       `json:"bytes"`
	// Preview is the output's JSON, cut to StepPreviewBytes (at a
	// character boundary, "…" added) when longer.
	Preview string `json:"preview,omitempty"`
	Error   string `json:"error,omitempty"`
	// Usage is what the step's work spent, if it reported any.
	Usage *jetruntype.Usage `json:"usage,omitempty"`
}

type traceTotals struct {
	jetruntype.UsageTotals
	Runs  int `json:"runs"`
	Steps int `json:"steps"`
}

// trace answers GET /v1/runs/{id}/trace.
func (a *api) trace(w http.ResponseWriter, r *http.Request) {
	top, ok := a.row(w, r)
	if !ok {
		return
	}
	if err := a.view.Sync(r.Context()); err != nil {
		a.fail(w, r, err)
		return
	}
	body, err := a.buildTrace(r.Context(), top)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// buildTrace walks top's tree depth first (the runs view finds each run's
// children; the parent client reads each row and its steps), stopping at
// a.maxTraceRuns runs.
func (a *api) buildTrace(ctx context.Context, top *jetruntype.Run) (traceBody, error) {
	body := traceBody{RunID: top.ID, Runs: []traceRun{}, MaxRuns: a.maxTraceRuns, MaxSteps: MaxTraceSteps}
	type item struct {
		id    string
		level int
	}
	stack := []item{{top.ID, 0}}
	seen := map[string]bool{top.ID: true}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if len(body.Runs) == a.maxTraceRuns {
			body.Truncated = true
			break
		}
		row := top
		if it.id != top.ID {
			var err error
			row, err = a.client.Inspect(ctx, it.id)
			if errors.Is(err, parent.ErrRunNotFound) {
				continue // cleared since the view listed it
			}
			if err != nil {
				return traceBody{}, err
			}
		}
		tr, cut, err := a.traceRun(ctx, row, it.level)
		if errors.Is(err, parent.ErrRunNotFound) && it.id != top.ID {
			continue // cleared since
		}
		if err != nil {
			return traceBody{}, err
		}
		body.Truncated = body.Truncated || cut
		body.Runs = append(body.Runs, tr)
		if it.level >= events.DefaultMaxDepth {
			continue
		}
		page, err := a.view.List(runview.Filter{Parent: row.ID, Limit: MaxListLimit})
		if err != nil {
			return traceBody{}, err
		}
		kids := page.Runs
		slices.SortFunc(kids, func(x, y runview.Summary) int {
			return cmp.Or(x.CreatedAt.Compare(y.CreatedAt), strings.Compare(x.ID, y.ID))
		})
		// Pushed last first, so the first child is visited next.
		for i := len(kids) - 1; i >= 0; i-- {
			if !seen[kids[i].ID] {
				seen[kids[i].ID] = true
				stack = append(stack, item{kids[i].ID, it.level + 1})
			}
		}
		body.Truncated = body.Truncated || page.Total > len(page.Runs)
	}
	for _, tr := range body.Runs {
		if u := tr.Usage; u != nil {
			body.Totals.InputTokens += u.InputTokens
			body.Totals.OutputTokens += u.OutputTokens
			body.Totals.CostMicros += u.CostMicros
		}
		body.Totals.Steps += len(tr.Steps)
	}
	body.Totals.Runs = len(body.Runs)
	body.Now = time.Now().UTC()
	return body, nil
}

// traceRun returns row as a trace shows it, with at most MaxTraceSteps of
// its steps (cut reports more).
func (a *api) traceRun(ctx context.Context, row *jetruntype.Run, level int) (tr traceRun, cut bool, err error) {
	tr = traceRun{ID: row.ID, Parent: row.Parent, ParentToolCallID: row.ParentToolCallID, AgentType: row.AgentType,
		Level: level, Status: row.Status, Reason: row.Reason, Final: row.Status.Final(),
		CreatedAt: row.CreatedAt, StartedAt: row.StartedAt, FinishedAt: row.FinishedAt,
		Usage: row.Usage, TreeUsage: row.TreeUsage, Overrun: row.Overrun, Steps: []traceStep{}}
	steps, err := a.client.Steps(ctx, row.ID)
	if err != nil {
		return traceRun{}, false, fmt.Errorf("steps of run %s: %w", row.ID, err)
	}
	if len(steps) > MaxTraceSteps {
		steps, cut = steps[:MaxTraceSteps], true
	}
	for _, st := range steps {
		ts := traceStep{Name: st.Name, At: st.At, DurationMs: st.DurationMs, Attempt: st.Attempt, Error: st.Error, Usage: st.Usage}
		if st.Error == "" {
			ts.Bytes, ts.Preview = len(st.Output), preview(st.Output)
		}
		tr.Steps = append(tr.Steps, ts)
	}
	return tr, cut, nil
}

// preview returns out's JSON, compacted, cut to StepPreviewBytes at a
// character boundary with "…" when longer.
func preview(out json.RawMessage) string {
	if len(out) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, out); err != nil {
		b.Reset()
		b.Write(out)
	}
	p := b.Bytes()
	if len(p) <= StepPreviewBytes {
		return string(p)
	}
	cut := StepPreviewBytes
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return string(p[:cut]) + "…"
}
