package jetruncli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/events"
)

// asksCmd lists what runs wait on people for: jetrun asks [--status S]
// [--type TYPE] [--tree ID] [--run ID] [--older-than D] [--limit N].
func (c *cli) asksCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	status := fs.String("status", events.AskOpen, "open, answered, closed or all")
	agentType := fs.String("type", "", "only asks of runs of this agent type")
	tree := fs.String("tree", "", "only asks of runs in this tree (the id of its top run)")
	runID := fs.String("run", "", "only asks of this run")
	olderThan := fs.Duration("older-than", 0, "only asks waiting longer than this (e.g. 10m)")
	limit := fs.Int("limit", 50, "at most this many asks")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 0 {
			return 0, usagef("asks takes no arguments")
		}
		f := asks.Filter{Status: *status, AgentType: *agentType, Tree: *tree, RunID: *runID, OlderThan: *olderThan,
			Limit: max(*limit, 1)}
		switch f.Status {
		case "all":
			f.Status = ""
		case events.AskOpen, events.AskAnswered, events.AskClosed:
		default:
			return 0, usagef("--status must be open, answered, closed or all, got %q", f.Status)
		}
		// A one-shot view: the bucket's entries, read once by a watch.
		view, err := asks.StartView(ctx, engine.From(c.rt).Asks(), nil)
		if err != nil {
			return 0, err
		}
		page, err := view.List(f)
		view.Stop()
		if err != nil {
			return 0, err
		}
		if c.json {
			return ExitOK, c.printJSON(map[string]any{"asks": nonNilAsks(page.Asks), "total": page.Total})
		}
		tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRUN\tTYPE\tKIND\tSTATUS\tTITLE\tDIGEST\tASKED")
		for _, a := range page.Asks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.RunID, a.AgentType, a.Kind, a.Status,
				cmp.Or(a.Title, "-"), a.Digest, stamp(a.AskedAt))
		}
		if err := tw.Flush(); err != nil {
			return 0, err
		}
		if page.Total > len(page.Asks) {
			fmt.Fprintf(c.out, "(%d of %d; --limit for more)\n", len(page.Asks), page.Total)
		}
		return ExitOK, nil
	}
}

func nonNilAsks(v []*events.Ask) []*events.Ask {
	if v == nil {
		return []*events.Ask{}
	}
	return v
}

// answerCmd answers an ask: jetrun answer ID --value JSON [--digest D]
// [--by NAME]. Without --digest it answers the payload the ask shows now.
func (c *cli) answerCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	value := fs.String("value", "", `the answer (JSON, @file or -), e.g. '{"approved":true}'`)
	digest := fs.String("digest", "", "the digest of the payload you answer (jetrun asks shows it): a changed payload is refused")
	by := fs.String("by", cmp.Or(os.Getenv("USER"), "cli"), "who answers")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) > 1 { // flags after the id: jetrun answer ID --value JSON
			if err := fs.Parse(args[1:]); err != nil {
				return 0, usageError{err}
			}
			args = append(args[:1], fs.Args()...)
		}
		if len(args) != 1 || *value == "" {
			return 0, usagef("want ID --value JSON")
		}
		raw, err := c.readJSONArg(*value)
		if err != nil {
			return 0, err
		}
		st := engine.From(c.rt).Asks()
		d := *digest
		if d == "" {
			a, _, err := st.Get(ctx, args[0])
			if err != nil {
				return 0, err
			}
			d = a.Digest
		}
		a, err := st.Answer(ctx, args[0], d, raw, *by)
		if err != nil {
			return 0, describeAnswerError(err)
		}
		if a, err = st.Deliver(ctx, a); err != nil {
			fmt.Fprintf(c.errw, "jetrun answer: the answer is stored; a parent-worker delivers it: %v\n", err)
		}
		if c.json {
			return ExitOK, c.printJSON(a)
		}
		fmt.Fprintf(c.out, "ask %s of run %s answered by %s at %s\n", a.ID, a.RunID, a.Answer.By, a.Answer.At.Format(time.RFC3339))
		return ExitOK, nil
	}
}

// describeAnswerError makes a refused answer a usage error when the
// person can correct it.
func describeAnswerError(err error) error {
	var bad *asks.ValueError
	if errors.As(err, &bad) {
		return usageError{err}
	}
	return err
}
