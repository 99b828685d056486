package jetruncli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
)

// treeNode is a run with its nested runs, as jetrun get --json shows it.
type treeNode struct {
	*jetruntype.Run
	Children []treeNode `json:"children,omitempty"`
	// Calls are the run's calls to its caller, each with its reply once
	// answered (top run only).
	Calls []parent.CallState `json:"calls,omitempty"`
	// Steps are the run's durable steps (steps.go), for the first
	// maxTreeStepRuns runs of the tree.
	Steps []stepLine `json:"steps,omitempty"`
	// Totals add up the usage of the whole tree (top run only).
	Totals *treeTotals `json:"totals,omitempty"`
}

// treeTotals are a tree's totals as jetrun get shows them.
type treeTotals struct {
	jetruntype.UsageTotals
	Runs  int `json:"runs"`
	Steps int `json:"steps"`
}

// maxTreeStepRuns bounds the runs of a tree whose steps jetrun get reads
// (one replay each), depth first from the top.
const maxTreeStepRuns = 100

// addSteps reads the steps of n's runs, depth first, for at most
// maxTreeStepRuns runs, and sets n's totals; it reports whether it read
// them all.
func (c *cli) addSteps(ctx context.Context, n *treeNode) (bool, error) {
	t := &treeTotals{}
	read := 0
	var walk func(n *treeNode) error
	walk = func(n *treeNode) error {
		if read < maxTreeStepRuns {
			read++
			var err error
			if n.Steps, err = c.steps(ctx, n.ID); err != nil && !errors.Is(err, parent.ErrRunNotFound) {
				return err
			}
		}
		t.Runs++
		t.Steps += len(n.Steps)
		if u := n.Usage; u != nil {
			t.InputTokens += u.InputTokens
			t.OutputTokens += u.OutputTokens
			t.CostMicros += u.CostMicros
		}
		for i := range n.Children {
			if err := walk(&n.Children[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(n); err != nil {
		return false, err
	}
	n.Totals = t
	return t.Runs <= maxTreeStepRuns, nil
}

// runTree returns r with its descendants (down to depth levels), children
// ordered by tool call (in the order of their first child), then display
// order, then id.
func (c *cli) runTree(ctx context.Context, r *jetruntype.Run, depth int) (treeNode, error) {
	rows, err := c.client.List(ctx)
	if err != nil {
		return treeNode{}, fmt.Errorf("list nested runs: %w", err)
	}
	byParent := make(map[string][]*jetruntype.Run)
	for _, x := range rows {
		if x.Parent != "" {
			byParent[x.Parent] = append(byParent[x.Parent], x)
		}
	}
	var build func(r *jetruntype.Run, depth int) treeNode
	build = func(r *jetruntype.Run, depth int) treeNode {
		n := treeNode{Run: r}
		if depth <= 0 {
			return n
		}
		for _, ch := range orderChildren(byParent[r.ID]) {
			n.Children = append(n.Children, build(ch, depth-1))
		}
		return n
	}
	return build(r, depth), nil
}

// orderChildren groups children by parentToolCallId (groups in the order
// of their earliest child) and orders each group by displayOrder, then
// creation, then id.
func orderChildren(rows []*jetruntype.Run) []*jetruntype.Run {
	slices.SortFunc(rows, func(a, b *jetruntype.Run) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	var groups []string
	group := make(map[string][]*jetruntype.Run)
	for _, r := range rows {
		if _, ok := group[r.ParentToolCallID]; !ok {
			groups = append(groups, r.ParentToolCallID)
		}
		group[r.ParentToolCallID] = append(group[r.ParentToolCallID], r)
	}
	out := make([]*jetruntype.Run, 0, len(rows))
	for _, g := range groups {
		rs := group[g]
		slices.SortStableFunc(rs, func(a, b *jetruntype.Run) int { return cmp.Compare(a.DisplayOrder, b.DisplayOrder) })
		out = append(out, rs...)
	}
	return out
}

// describeTree prints the run's calls and its nested runs, grouped by tool
// call, under the row describe printed.
func (c *cli) describeTree(n treeNode, allSteps bool) {
	c.describeSteps(n.Steps)
	if len(n.Calls) > 0 {
		fmt.Fprintln(c.out, "calls")
		for _, cs := range n.Calls {
			state := "pending"
			switch {
			case cs.Reply != nil && cs.Reply.Error != "":
				state = "failed: " + cs.Reply.Error
			case cs.Reply != nil:
				state = "answered"
			}
			fmt.Fprintf(c.out, "  %d  %s  %s\n", cs.Call.Seq, cs.Call.Name, state)
		}
	}
	if len(n.Children) > 0 {
		fmt.Fprintln(c.out, "children")
		c.printChildren(n.Children, "  ")
	}
	if t := n.Totals; t != nil && (len(n.Children) > 0 || t.Steps > 0) {
		line := fmt.Sprintf("tree totals  %d runs, %d steps, %s", t.Runs, t.Steps, totals(t.UsageTotals))
		if !allSteps {
			line += fmt.Sprintf(" (steps of the first %d runs)", maxTreeStepRuns)
		}
		fmt.Fprintln(c.out, line)
	}
}

// runDuration is how long r ran ("running 4s" while it runs), or "" if it
// has not started.
func runDuration(r *jetruntype.Run, now time.Time) string {
	switch {
	case r.StartedAt.IsZero():
		return ""
	case r.FinishedAt.IsZero():
		return "running " + now.Sub(r.StartedAt).Round(time.Millisecond).String()
	}
	return r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
}

func (c *cli) printChildren(children []treeNode, indent string) {
	last := "\x00"
	for _, ch := range children {
		if ch.ParentToolCallID != last {
			last = ch.ParentToolCallID
			fmt.Fprintf(c.out, "%s%s\n", indent, cmp.Or(ch.ParentToolCallID, "(no tool call)"))
		}
		line := fmt.Sprintf("%s  %s  %s  %s", indent, ch.ID, ch.AgentType, ch.Status)
		if ch.Reason != "" && ch.Status != events.StatusCompleted {
			line += " (" + ch.Reason + ")"
		}
		if d := runDuration(ch.Run, time.Now()); d != "" {
			line += "  " + d
		}
		if ch.Usage != nil {
			line += "  " + totals(ch.Usage.UsageTotals)
		}
		if ch.Summary != "" {
			line += "  " + oneLine(ch.Summary, 60)
		}
		fmt.Fprintln(c.out, line)
		for _, st := range ch.Steps {
			fmt.Fprintf(c.out, "%s      step %s\n", indent, st.describe())
		}
		c.printChildren(ch.Children, indent+"    ")
	}
}

// replyCmd answers a run's pending call: jetrun reply ID SEQ [OUTPUT], or
// with --error a failure the run gets as an error value.
func (c *cli) replyCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	errText := fs.String("error", "", "answer with this failure instead of an output")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) < 2 || len(args) > 3 {
			return 0, usagef("want ID SEQ [OUTPUT]")
		}
		seq, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil || seq <= 0 {
			return 0, usagef("SEQ must be a call's sequence number (jetrun get %s lists them), got %q", args[0], args[1])
		}
		var output any
		if len(args) == 3 {
			if *errText != "" {
				return 0, usagef("give OUTPUT or --error, not both")
			}
			raw, err := c.readJSONArg(args[2])
			if err != nil {
				return 0, err
			}
			output = raw
		}
		cs, err := c.client.Answer(ctx, args[0], seq, output, *errText)
		if err != nil {
			return 0, err
		}
		if c.json {
			return ExitOK, c.printJSON(map[string]any{"runId": args[0], "seq": seq, "name": cs.Call.Name})
		}
		fmt.Fprintf(c.out, "call %d (%s) of %s answered\n", seq, cs.Call.Name, args[0])
		return ExitOK, nil
	}
}
