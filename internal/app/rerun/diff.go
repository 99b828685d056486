// Package rerun compares two runs step by step (Compare, for GET
// /v1/runs/{a}/diff/{b} and `jetrun diff`), and re-runs the runs a filter
// matches from a step, bounded by a cap on runs and a budget, then
// compares each with its original (Batch, for POST /v1/runs:rerun and
// `jetrun rerun --batch`). It only reads runs and starts re-runs through
// the parent client (parent.Client.Rerun): nothing here changes a run.
package rerun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Step verdicts of a Diff.
const (
	Equal   = "equal"   // both runs stored the step, with equal outputs
	Changed = "changed" // both stored it, with different outputs (or failures)
	OnlyA   = "only-a"  // only run a stored it
	OnlyB   = "only-b"  // only run b stored it
)

// Side is one run's side of a step: what it spent on it, and whether it
// was given back stored (a re-run's step it did not execute).
type Side struct {
	Output json.RawMessage               `json:"output,omitempty"` // only for a changed step
	Error  string                        `json:"error,omitempty"`
	Usage  jetruntype.UsageTotals        `json:"usage"`
	Given  string                        `json:"givenFrom,omitempty"`
	Models map[string]events.UsageTotals `json:"models,omitempty"`
}

// StepDiff compares one step of the two runs.
type StepDiff struct {
	Name string `json:"name"`
	// Verdict is Equal, Changed, OnlyA or OnlyB.
	Verdict string `json:"verdict"`
	A       *Side  `json:"a,omitempty"`
	B       *Side  `json:"b,omitempty"`
}

// RunSide is a run as a Diff shows it.
type RunSide struct {
	ID         string                 `json:"id"`
	Status     events.Status          `json:"status"`
	Input      json.RawMessage        `json:"input,omitempty"`
	ForkedFrom *jetruntype.Fork       `json:"forkedFrom,omitempty"`
	Usage      jetruntype.UsageTotals `json:"usage"`
}

// Diff is what Compare answers.
type Diff struct {
	A     RunSide    `json:"a"`
	B     RunSide    `json:"b"`
	Steps []StepDiff `json:"steps"`
	// OutputEqual says whether the runs' outputs are equal.
	OutputEqual bool `json:"outputEqual"`
	// Equal and Changed count the steps of each verdict; Totals are what
	// each run spent in all (its row's usage), and Delta b minus a.
	Equal   int        `json:"equal"`
	Changed int        `json:"changed"`
	Totals  DiffTotals `json:"totals"`
}

// DiffTotals are the two runs' usage totals and their difference.
type DiffTotals struct {
	A     jetruntype.UsageTotals `json:"a"`
	B     jetruntype.UsageTotals `json:"b"`
	Delta jetruntype.UsageTotals `json:"delta"`
}

// Compare reads runs a and b and compares them step by step, in a's
// stored order then b's steps a lacks. It returns parent.ErrRunNotFound
// (wrapped) for an unknown run.
func Compare(ctx context.Context, c *parent.Client, a, b string) (*Diff, error) {
	ra, sa, err := read(ctx, c, a)
	if err != nil {
		return nil, err
	}
	rb, sb, err := read(ctx, c, b)
	if err != nil {
		return nil, err
	}
	return compare(ra, sa, rb, sb), nil
}

func read(ctx context.Context, c *parent.Client, id string) (*jetruntype.Run, []events.Step, error) {
	row, err := c.Inspect(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	steps, err := c.Steps(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return row, steps, nil
}

func compare(ra *jetruntype.Run, sa []events.Step, rb *jetruntype.Run, sb []events.Step) *Diff {
	d := &Diff{A: runSide(ra), B: runSide(rb), OutputEqual: jsonEqual(ra.Output, rb.Output)}
	d.Totals = DiffTotals{A: d.A.Usage, B: d.B.Usage, Delta: minus(d.B.Usage, d.A.Usage)}
	byName := make(map[string]events.Step, len(sb))
	for _, st := range sb {
		byName[st.Name] = st
	}
	seen := make(map[string]bool, len(sa))
	for _, st := range sa {
		seen[st.Name] = true
		other, ok := byName[st.Name]
		if !ok {
			d.Steps = append(d.Steps, StepDiff{Name: st.Name, Verdict: OnlyA, A: side(st, false)})
			continue
		}
		sd := StepDiff{Name: st.Name, Verdict: Equal}
		if st.Error != other.Error || !jsonEqual(st.Output, other.Output) {
			sd.Verdict = Changed
		}
		sd.A, sd.B = side(st, sd.Verdict == Changed), side(other, sd.Verdict == Changed)
		d.Steps = append(d.Steps, sd)
	}
	for _, st := range sb {
		if !seen[st.Name] {
			d.Steps = append(d.Steps, StepDiff{Name: st.Name, Verdict: OnlyB, B: side(st, false)})
		}
	}
	for _, s := range d.Steps {
		switch s.Verdict {
		case Equal:
			d.Equal++
		case Changed:
			d.Changed++
		}
	}
	return d
}

func runSide(r *jetruntype.Run) RunSide {
	s := RunSide{ID: r.ID, Status: r.Status, Input: r.Input, ForkedFrom: r.ForkedFrom}
	if r.Usage != nil {
		s.Usage = r.Usage.UsageTotals
	}
	return s
}

func side(st events.Step, withOutput bool) *Side {
	s := &Side{Error: st.Error, Given: st.GivenFrom}
	if st.Usage != nil {
		s.Usage, s.Models = st.Usage.UsageTotals, st.Usage.Models
	}
	if withOutput && st.Error == "" {
		s.Output = st.Output
	}
	return s
}

func minus(a, b jetruntype.UsageTotals) jetruntype.UsageTotals {
	return jetruntype.UsageTotals{InputTokens: a.InputTokens - b.InputTokens,
		OutputTokens: a.OutputTokens - b.OutputTokens, CostMicros: a.CostMicros - b.CostMicros}
}

// jsonEqual compares two JSON values as values (key order and spacing
// aside); two absent values are equal.
func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// Print writes d as a table for people: a line per step with its verdict
// and what each side spent, then the totals.
func (d *Diff) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "STEP\t%s\t%s\t%s\n", "VERDICT", "A "+d.A.ID, "B "+d.B.ID)
	for _, s := range d.Steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Verdict, s.A.describe(), s.B.describe())
	}
	out := "equal"
	if !d.OutputEqual {
		out = "changed"
	}
	fmt.Fprintf(tw, "output\t%s\t%s\t%s\n", out, string(d.A.Status), string(d.B.Status))
	fmt.Fprintf(tw, "total\t%d equal, %d changed\t%s\t%s\n", d.Equal, d.Changed, cost(d.Totals.A), cost(d.Totals.B))
	return tw.Flush()
}

func (s *Side) describe() string {
	switch {
	case s == nil:
		return "-"
	case s.Given != "":
		return "given from " + s.Given
	}
	parts := []string{cost(s.Usage)}
	if s.Error != "" {
		parts = append(parts, "failed")
	}
	return strings.Join(parts, " ")
}

func cost(u jetruntype.UsageTotals) string {
	return fmt.Sprintf("%d tokens %d micros", u.Tokens(), u.CostMicros)
}
