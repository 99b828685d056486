package jetruncli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jetrun/jetrun/internal/app/rerun"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// assignments collects repeated NAME=JSON flags.
type assignments map[string]json.RawMessage

func (a assignments) String() string { return fmt.Sprint(map[string]json.RawMessage(a)) }

func (a assignments) Set(s string) error {
	name, v, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=JSON, got %q", s)
	}
	if !json.Valid([]byte(v)) {
		return fmt.Errorf("%s: %.60q is not valid JSON (a string is quoted: %s='\"text\"')", name, v, name)
	}
	a[name] = json.RawMessage(v)
	return nil
}

// rerunCmd is `jetrun rerun ID --from STEP [--input JSON] [--step NAME=JSON]
// [--run-id ID] [--wait]`, and with --batch the batch form: re-run the
// runs of --type (--status, --since, --until) from --from with --set overrides,
// capped by --max-runs and --budget-micros/--budget-tokens, then print
// one table.
func (c *cli) rerunCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	from := fs.String("from", "", "the step to execute from: the steps stored before it are given back (default: every stored step, a retry)")
	input := fs.String("input", "", "a new input (JSON, @file or -) instead of the run's")
	runID := fs.String("run-id", "", "the re-run's id (default: a new random one)")
	wait := fs.Bool("wait", false, "wait for the re-run's outcome, showing progress live")
	steps := assignments{}
	fs.Var(steps, "step", "NAME=JSON: override the output of a step given back (repeatable)")
	batch := fs.Bool("batch", false, "re-run every run --type, --status, --since and --until select, then print one table")
	agentType := fs.String("type", "", "with --batch: the agent type of the runs")
	status := fs.String("status", "", "with --batch: statuses, comma-separated (default: any ended run)")
	since := fs.Duration("since", 0, "with --batch: only runs created within this long (say 24h)")
	until := fs.Duration("until", 0, "with --batch: only runs created at least this long ago (say 1h; with --since, a time range)")
	set := assignments{}
	fs.Var(set, "set", "with --batch: PATH=JSON, input.<field> or steps.<name> (repeatable), say input.model='\"m2\"'")
	maxRuns := fs.Int("max-runs", 0, fmt.Sprintf("with --batch: re-run at most this many (default %d, at most %d)", rerun.DefaultMaxRuns, rerun.MaxRuns))
	concurrency := fs.Int("concurrency", 0, fmt.Sprintf("with --batch: re-runs at once (default %d, at most %d; one at a time with a budget)", rerun.DefaultConcurrency, rerun.MaxConcurrency))
	budgetMicros := fs.Int64("budget-micros", 0, "with --batch: what the re-runs may cost together, in micros")
	budgetTokens := fs.Int64("budget-tokens", 0, "with --batch: the tokens the re-runs may spend together")
	return func(ctx context.Context, args []string) (int, error) {
		args, err := interleaved(fs, args)
		if err != nil {
			return 0, err
		}
		if *batch {
			if len(args) != 0 {
				return 0, usagef("--batch takes no run id")
			}
			req := rerun.BatchRequest{AgentType: *agentType, FromStep: *from, Set: set, MaxRuns: *maxRuns, Concurrency: *concurrency}
			if *status != "" {
				for _, s := range strings.Split(*status, ",") {
					req.Statuses = append(req.Statuses, events.Status(s))
				}
			}
			if *since > 0 {
				req.Since = time.Now().Add(-*since)
			}
			if *until > 0 {
				req.Until = time.Now().Add(-*until)
			}
			if *budgetMicros > 0 || *budgetTokens > 0 {
				req.Budget = &events.TreeBudget{CostMicros: *budgetMicros, Tokens: *budgetTokens}
			}
			return c.rerunBatch(ctx, req)
		}
		if len(args) != 1 {
			return 0, usagef("want ID --from STEP")
		}
		req := parent.RerunRequest{FromStep: *from, RunID: *runID}
		if *input != "" {
			in, err := c.readJSONArg(*input)
			if err != nil {
				return 0, err
			}
			req.Input = in
		}
		for name, v := range steps {
			if req.Steps == nil {
				req.Steps = map[string]any{}
			}
			req.Steps[name] = v
		}
		d, err := c.client.Rerun(ctx, args[0], req)
		switch {
		case errors.Is(err, parent.ErrRunNotFound):
			return 0, fmt.Errorf("no run %q", args[0])
		case errors.Is(err, parent.ErrBadRequest), errors.Is(err, parent.ErrStepNotStored):
			return 0, usageError{err}
		case err != nil:
			return 0, err
		}
		row := d.Run
		if !*wait {
			if c.json {
				return ExitOK, c.printJSON(row)
			}
			given := "no steps given"
			if f := row.ForkedFrom; f != nil && len(f.Given) > 0 {
				given = "given " + givenList(f)
			}
			fmt.Fprintf(c.out, "%s re-runs %s from %s (%s; %s)\n", row.ID, args[0], cmpStep(*from), given, row.Status)
			return ExitOK, nil
		}
		return c.follow(ctx, row.ID)
	}
}

// forkedFrom describes a re-run's origin: "r1 at step s5 (given s1, s2)".
func forkedFrom(f *jetruntype.Fork) string {
	if f == nil {
		return ""
	}
	s := f.RunID + " at step " + cmpStep(f.Step)
	if len(f.Given) > 0 {
		s += " (given " + givenList(f) + ")"
	}
	return s
}

// givenList names the steps a re-run was given: "s1, s2" or, past the
// names its row keeps, "s1, …, s100 and 50 more".
func givenList(f *jetruntype.Fork) string {
	s := strings.Join(f.Given, ", ")
	if more := f.GivenCount - len(f.Given); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

func cmpStep(s string) string {
	if s == "" {
		return "its first step not stored"
	}
	return s
}

func (c *cli) rerunBatch(ctx context.Context, req rerun.BatchRequest) (int, error) {
	res, err := rerun.Batch(ctx, c.client, req)
	if errors.Is(err, rerun.ErrBadBatch) {
		return 0, usageError{err}
	}
	if err != nil {
		return 0, err
	}
	if c.json {
		return ExitOK, c.printJSON(res)
	}
	return ExitOK, res.Print(c.out)
}

// diffCmd is `jetrun diff A B`: the two runs step by step.
func (c *cli) diffCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	return func(ctx context.Context, args []string) (int, error) {
		args, err := interleaved(fs, args)
		if err != nil {
			return 0, err
		}
		if len(args) != 2 {
			return 0, usagef("want two run ids")
		}
		d, err := rerun.Compare(ctx, c.client, args[0], args[1])
		if errors.Is(err, parent.ErrRunNotFound) {
			return 0, fmt.Errorf("no run %q or %q: %w", args[0], args[1], err)
		}
		if err != nil {
			return 0, err
		}
		if c.json {
			return ExitOK, c.printJSON(d)
		}
		return ExitOK, d.Print(c.out)
	}
}

// interleaved parses the flags that follow positional arguments (`jetrun
// rerun ID --from STEP`) and returns the positional arguments.
func interleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if strings.HasPrefix(args[0], "-") {
			if err := fs.Parse(args); err != nil {
				return nil, usageError{err}
			}
			args = fs.Args()
			continue
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	return pos, nil
}
