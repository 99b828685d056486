package rerun

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Batch bounds.
const (
	// DefaultMaxRuns is how many runs a Batch re-runs when its request
	// says nothing; MaxRuns is the most it re-runs at all.
	DefaultMaxRuns = 20
	MaxRuns        = 500
	// DefaultConcurrency is how many re-runs of a batch without a budget
	// run at once when its request says nothing; MaxConcurrency is the
	// most. A batch with a budget re-runs one at a time: each gets what
	// the ones before it left.
	DefaultConcurrency = 8
	MaxConcurrency     = 64
)

// ErrBadBatch is returned (wrapped) by Batch for an invalid request.
var ErrBadBatch = errors.New("bad batch re-run")

// BatchRequest selects runs and says how to re-run them.
type BatchRequest struct {
	// AgentType, Statuses, Since and Until select the runs (created in
	// [Since, Until); zero times: no bound). Live runs are never selected.
	AgentType string          `json:"agentType"`
	Statuses  []events.Status `json:"statuses,omitempty"`
	Since     time.Time       `json:"since,omitzero"`
	Until     time.Time       `json:"until,omitzero"`
	// FromStep is the step each run is re-run from (required).
	FromStep string `json:"fromStep"`
	// Set overrides, for every re-run, a field of its input ("input.model")
	// or the output of a given step ("steps.plan-1"), by path.
	Set map[string]json.RawMessage `json:"set,omitempty"`
	// MaxRuns caps the runs re-run (newest first; default DefaultMaxRuns,
	// at most MaxRuns).
	MaxRuns int `json:"maxRuns,omitempty"`
	// Budget bounds what the batch's re-runs spend together: each gets
	// what is left of it as its tree budget, and none starts once it is
	// spent.
	Budget *events.TreeBudget `json:"budget,omitempty"`
	// Concurrency is how many re-runs run at once (default
	// DefaultConcurrency, at most MaxConcurrency; 1 with a Budget).
	Concurrency int `json:"concurrency,omitempty"`
}

// BatchRun is one run of a batch: the original, its re-run, and how they
// compare.
type BatchRun struct {
	RunID   string        `json:"runId"`
	RerunID string        `json:"rerunId,omitempty"`
	Status  events.Status `json:"status,omitempty"` // the re-run's
	// OutputChanged says whether the re-run's output differs from the
	// original's; ChangedSteps names its steps whose outputs differ.
	OutputChanged bool                   `json:"outputChanged"`
	ChangedSteps  []string               `json:"changedSteps,omitempty"`
	Usage         jetruntype.UsageTotals `json:"usage"`    // what the re-run spent
	Original      jetruntype.UsageTotals `json:"original"` // what the original spent
	// Skipped says why the run was not re-run (no such step, the budget
	// spent, …).
	Skipped string `json:"skipped,omitempty"`
}

// BatchResult is what Batch answers: a row per selected run, and totals.
type BatchResult struct {
	Runs []BatchRun `json:"runs"`
	// Matched counts the runs the filter selected (before MaxRuns);
	// Rerun those re-run; Changed those whose output changed.
	Matched int `json:"matched"`
	Rerun   int `json:"rerun"`
	Changed int `json:"changed"`
	// Usage is what the re-runs spent together, Original what their
	// originals had.
	Usage    jetruntype.UsageTotals `json:"usage"`
	Original jetruntype.UsageTotals `json:"original"`
}

func (req *BatchRequest) validate() error {
	var errs []error
	if req.AgentType == "" {
		errs = append(errs, errors.New("agentType is required"))
	}
	if err := events.ValidateStepName(req.FromStep); err != nil {
		errs = append(errs, fmt.Errorf("fromStep: %w", err))
	}
	if req.MaxRuns < 0 || req.MaxRuns > MaxRuns {
		errs = append(errs, fmt.Errorf("maxRuns must be 0 to %d, got %d", MaxRuns, req.MaxRuns))
	}
	if req.Concurrency < 0 || req.Concurrency > MaxConcurrency {
		errs = append(errs, fmt.Errorf("concurrency must be 0 to %d, got %d", MaxConcurrency, req.Concurrency))
	} else if req.Budget != nil && req.Concurrency > 1 {
		errs = append(errs, errors.New(`a batch with a "budget" re-runs one at a time: each gets what the ones before it left`))
	}
	if err := req.Budget.Validate(); err != nil {
		errs = append(errs, err)
	} else if b := req.Budget; b != nil && b.CostMicros == 0 && b.Tokens == 0 {
		errs = append(errs, errors.New(`"budget" bounds the batch's costMicros or tokens`))
	}
	for _, s := range req.Statuses {
		if !s.Terminal() {
			errs = append(errs, fmt.Errorf("status %q: only ended runs (completed, error, aborted, interrupted) can be re-run", s))
		}
	}
	for path, v := range req.Set {
		if !json.Valid(v) {
			errs = append(errs, fmt.Errorf("set %s: not valid JSON", path))
		}
		if !strings.HasPrefix(path, "input.") && !strings.HasPrefix(path, "steps.") {
			errs = append(errs, fmt.Errorf(`set %s: a path starts with "input." or "steps."`, path))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrBadBatch, err)
	}
	return nil
}

// Batch re-runs the runs req selects from req.FromStep with req.Set
// applied, req.Concurrency at a time (one at a time with req.Budget, until
// it is spent), each awaited and compared with its original, at most
// req.MaxRuns of them. A run that cannot be re-run (it has no such step,
// say) is listed as skipped. It changes no original.
func Batch(ctx context.Context, c *parent.Client, req BatchRequest) (*BatchResult, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	rows, err := c.List(ctx, req.Statuses...)
	if err != nil {
		return nil, err
	}
	var runs []*jetruntype.Run
	for _, r := range rows {
		if r.AgentType == req.AgentType && !r.Live() && inRange(r.CreatedAt, req.Since, req.Until) {
			runs = append(runs, r)
		}
	}
	res := &BatchResult{Matched: len(runs)}
	runs = runs[:min(len(runs), cmp.Or(req.MaxRuns, DefaultMaxRuns))]
	res.Runs = make([]BatchRun, len(runs))
	for i, r := range runs {
		res.Runs[i].RunID = r.ID
		if r.Usage != nil {
			res.Runs[i].Original = r.Usage.UsageTotals
		}
	}
	if req.Budget != nil {
		left := req.Budget
		for i, r := range runs {
			br := &res.Runs[i]
			if spent(left) {
				br.Skipped = "the batch's budget is spent"
				continue
			}
			one(ctx, c, req, r, left, br)
			if br.RerunID != "" {
				left = &events.TreeBudget{Tokens: less(left.Tokens, br.Usage.Tokens()), CostMicros: less(left.CostMicros, br.Usage.CostMicros)}
			}
			if ctx.Err() != nil {
				break
			}
		}
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, cmp.Or(req.Concurrency, DefaultConcurrency))
		for i, r := range runs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			wg.Go(func() {
				defer func() { <-sem }()
				one(ctx, c, req, r, nil, &res.Runs[i])
			})
		}
		wg.Wait()
	}
	for i := range res.Runs {
		br := &res.Runs[i]
		if br.RerunID == "" && br.Skipped == "" && ctx.Err() != nil { // never started
			br.Skipped = "not started: " + context.Cause(ctx).Error()
		}
		if br.RerunID != "" {
			res.Rerun++
			res.Usage = res.Usage.Add(br.Usage)
			res.Original = res.Original.Add(br.Original)
			if br.OutputChanged {
				res.Changed++
			}
		}
	}
	return res, ctx.Err()
}

// one re-runs r, awaits its re-run and compares the two into br.
func one(ctx context.Context, c *parent.Client, req BatchRequest, r *jetruntype.Run, budget *events.TreeBudget, br *BatchRun) {
	rr, err := rerunRequest(req, r)
	if err != nil {
		br.Skipped = err.Error()
		return
	}
	if budget != nil {
		rr.Budget = &events.TreeBudget{Tokens: budget.Tokens, CostMicros: budget.CostMicros}
	}
	d, err := c.Rerun(ctx, r.ID, rr)
	if err != nil {
		br.Skipped = err.Error()
		return
	}
	br.RerunID = d.Run.ID
	if _, err := c.Await(ctx, d.Run.ID); err != nil && !errors.As(err, new(*parent.Failure)) {
		br.Skipped = "await the re-run: " + err.Error()
		return
	}
	diff, err := Compare(ctx, c, r.ID, d.Run.ID)
	if err != nil {
		br.Skipped = "compare: " + err.Error()
		return
	}
	br.Status, br.Usage, br.OutputChanged = diff.B.Status, diff.B.Usage, !diff.OutputEqual
	for _, s := range diff.Steps {
		if s.Verdict != Equal {
			br.ChangedSteps = append(br.ChangedSteps, s.Name)
		}
	}
}

// rerunRequest is the re-run of r that req asks for.
func rerunRequest(req BatchRequest, r *jetruntype.Run) (parent.RerunRequest, error) {
	rr := parent.RerunRequest{FromStep: req.FromStep}
	var input map[string]any
	for _, path := range sortedKeys(req.Set) {
		v := req.Set[path]
		if name, ok := strings.CutPrefix(path, "steps."); ok {
			if rr.Steps == nil {
				rr.Steps = map[string]any{}
			}
			rr.Steps[name] = v
			continue
		}
		if input == nil {
			input = map[string]any{}
			if len(r.Input) > 0 && string(r.Input) != "null" {
				if err := json.Unmarshal(r.Input, &input); err != nil {
					return rr, fmt.Errorf("its input is not a JSON object: cannot set %s", path)
				}
			}
		}
		if err := setPath(input, strings.Split(strings.TrimPrefix(path, "input."), "."), v); err != nil {
			return rr, fmt.Errorf("set %s: %w", path, err)
		}
	}
	if input != nil {
		rr.Input = input
	}
	return rr, nil
}

// setPath sets m's field at path to v, making the objects on the way.
func setPath(m map[string]any, path []string, v json.RawMessage) error {
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			if _, there := m[k]; there {
				return fmt.Errorf("%s is not an object", k)
			}
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
	return nil
}

func inRange(t, since, until time.Time) bool {
	return (since.IsZero() || !t.Before(since)) && (until.IsZero() || t.Before(until))
}

// spent says whether a batch budget has nothing left in a bound it sets.
func spent(b *events.TreeBudget) bool {
	return b.Tokens < 0 || b.CostMicros < 0 || (b.Tokens == 0 && b.CostMicros == 0)
}

// less is what is left of a bound after spending n: -1 once it is gone
// (0 would mean "no bound"), 0 for no bound.
func less(bound, n int64) int64 {
	switch {
	case bound == 0:
		return 0
	case bound-n <= 0:
		return -1
	}
	return bound - n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Print writes r as one table: per run, its re-run, whether its output
// changed and which steps, and what each cost; then the totals.
func (r *BatchResult) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tRE-RUN\tSTATUS\tOUTPUT\tCHANGED STEPS\tORIGINAL\tRE-RUN COST")
	for _, br := range r.Runs {
		if br.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\tskipped\t-\t%s\t%s\t-\n", br.RunID, br.Skipped, cost(br.Original))
			continue
		}
		out := "equal"
		if br.OutputChanged {
			out = "changed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", br.RunID, br.RerunID, br.Status, out,
			cmp.Or(strings.Join(br.ChangedSteps, ","), "-"), cost(br.Original), cost(br.Usage))
	}
	fmt.Fprintf(tw, "total\t%d of %d re-run\t\t%d changed\t\t%s\t%s\n", r.Rerun, r.Matched, r.Changed, cost(r.Original), cost(r.Usage))
	return tw.Flush()
}
