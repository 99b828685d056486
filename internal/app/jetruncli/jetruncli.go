// Package jetruncli is the jetrun command-line tool: dispatch runs and wait
// for them with a live progress bar, inspect, list, replay, cancel, signal
// and clear them. It talks to NATS directly, configured by the same JETRUN_*
// variables as the workers.
package jetruncli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/app/config"
	"github.com/jetrun/jetrun/internal/app/natsconn"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitFailure     = 1 // jetrun or NATS failed
	ExitUsage       = 2
	ExitRunError    = 3   // the run ended "error"
	ExitRunAborted  = 4   // the run ended "aborted"
	ExitInterrupted = 5   // the run was given up ("interrupted")
	ExitStopped     = 130 // the user stopped watching (Ctrl-C); the run goes on
)

const usage = `jetrun: dispatch, watch and steer jetrun runs.

Usage:
  jetrun dispatch [--wait] [--run-id ID] [--parent ID] [--tool-call-id ID] [--on-finish HANDLER [--on-milestones A,B]] [--json] TYPE INPUT
  jetrun get [--json] ID                 (the run, its tree of nested runs by tool call with steps and usage, its calls)
  jetrun ls [--status S[,S]] [--type TYPE] [--parent ID] [--tool-call-id ID] [--limit N] [--json]
  jetrun replay [--follow] [--after SEQ] [--json] ID
  jetrun cancel [--reason TEXT] [--json] ID
  jetrun signal [--json] ID NAME [PAYLOAD]
  jetrun reply [--error TEXT] [--json] ID SEQ [OUTPUT]   (answer a run's call; jetrun get lists them)
  jetrun clear [--status S[,S]] [--older-than DURATION] [--all] [--json]
  jetrun rerun ID --from STEP [--input INPUT] [--step NAME=JSON] [--run-id ID] [--wait] [--json]
  jetrun rerun --batch --type TYPE --from STEP [--status S[,S]] [--since 24h] [--set input.model='"m2"'] [--max-runs N] [--budget-micros N]
  jetrun diff [--json] A B                (two runs step by step: equal or changed, usage each side, totals)
  jetrun asks [--status open|answered|closed|all] [--type TYPE] [--tree ID] [--run ID] [--older-than D] [--limit N] [--json]
  jetrun answer [--digest D] [--by NAME] [--json] ID --value JSON   (answer an ask; the first answer wins)
  jetrun agents [--tools openai|anthropic|mcp] [--json]
  jetrun limits [--json] [set NAME requests=N,tokens=N,concurrent=N,window=D | pause NAME DURATION]   (provider limits)
  jetrun mcp                             (an MCP server on stdin/stdout: every live agent type a tool)

INPUT and PAYLOAD are JSON ('{"steps":5}'), or @file, or - for standard input.
dispatch --wait shows the run's progress live and exits with the outcome:
  0 completed, 3 error, 4 aborted, 5 interrupted; 1 when jetrun itself failed, 2 on bad usage,
  130 when you stop watching with Ctrl-C (the run goes on).
--json prints machine-readable output (replay: one event per line).

Settings (environment variables):
`

// Main runs the CLI and returns its exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		_ = config.Usage(stdout, &config.CLI{})
		return ExitOK
	}
	var cfg config.CLI
	if err := config.Load(&cfg); err != nil {
		fmt.Fprintf(stderr, "jetrun: %v\n", err)
		return ExitUsage
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "jetrun: unknown command %q; see jetrun --help\n", args[0])
		return ExitUsage
	}
	fs := flag.NewFlagSet("jetrun "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &cli{stdin: stdin, out: stdout, errw: stderr, retention: cfg.Retention}
	fs.BoolVar(&c.json, "json", false, "machine-readable output")
	run := cmd(c, fs)
	if err := fs.Parse(args[1:]); err != nil {
		return ExitUsage
	}
	logger, err := cfg.Log.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "jetrun: %v\n", err)
		return ExitUsage
	}
	nc, err := natsconn.Connect(cfg.NATS, "jetrun cli", logger, nats.MaxReconnects(3))
	if err != nil {
		fmt.Fprintf(stderr, "jetrun: %v\n", err)
		return ExitFailure
	}
	defer nc.Close()
	rt, err := jetrun.Open(ctx, nc, cfg.Streams.Runtime())
	if err != nil {
		fmt.Fprintf(stderr, "jetrun: %v\n", err)
		return ExitFailure
	}
	c.runs, c.rt = kv.New(rt), rt
	c.client, err = parent.New(rt, cfg.Reattach.ParentConfig(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Fprintf(stderr, "jetrun: %v\n", err)
		return ExitFailure
	}
	code, err := run(ctx, fs.Args())
	if errors.Is(err, errStopped) {
		fmt.Fprintf(stderr, "jetrun %s: %v\n", args[0], err)
		return ExitStopped
	}
	if err != nil {
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprintf(stderr, "jetrun %s: %v\n", args[0], err)
			return ExitUsage
		}
		fmt.Fprintf(stderr, "jetrun %s: %v\n", args[0], err)
		return ExitFailure
	}
	return code
}

// errStopped wraps the error of a command the user interrupted.
var errStopped = errors.New("stopped")

// usageError is a mistake in the command line.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// cli carries what every command uses.
type cli struct {
	client *parent.Client
	runs   *kv.Runs        // the rows, for the MCP server
	rt     *jetrun.Runtime // the runtime, for the MCP server
	stdin  io.Reader
	out    io.Writer
	errw   io.Writer
	json   bool
	// retention is the runs' retention (JETRUN_RETENTION), for jetrun mcp.
	retention time.Duration
	drain     time.Duration // drainAfterEnd when zero (follow)
}

// drainAfterEnd is how long follow waits, after the row says the run
// ended, for a replay that has not reached the end.
func (c *cli) drainAfterEnd() time.Duration { return cmp.Or(c.drain, drainAfterEnd) }

// command registers its flags and returns the function that runs it with
// the remaining arguments.
type command func(c *cli, fs *flag.FlagSet) func(ctx context.Context, args []string) (int, error)

var commands = map[string]command{
	"dispatch": (*cli).dispatchCmd,
	"get":      (*cli).getCmd,
	"ls":       (*cli).lsCmd,
	"replay":   (*cli).replayCmd,
	"cancel":   (*cli).cancelCmd,
	"signal":   (*cli).signalCmd,
	"reply":    (*cli).replyCmd,
	"clear":    (*cli).clearCmd,
	"rerun":    (*cli).rerunCmd, // rerun.go
	"diff":     (*cli).diffCmd,
	"asks":     (*cli).asksCmd,
	"answer":   (*cli).answerCmd,
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// readJSONArg reads a JSON argument: literal, @file, or - for stdin.
func (c *cli) readJSONArg(arg string) (json.RawMessage, error) {
	var data []byte
	switch {
	case arg == "-":
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return nil, err
		}
		data = b
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return nil, err
		}
		data = b
	default:
		data = []byte(arg)
	}
	if !json.Valid(data) {
		return nil, usagef("%.60q is not valid JSON", data)
	}
	return json.RawMessage(data), nil
}

func (c *cli) getCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 1 {
			return 0, usagef("want one run id")
		}
		row, err := c.client.Inspect(ctx, args[0])
		if errors.Is(err, parent.ErrRunNotFound) {
			return 0, fmt.Errorf("no run %q", args[0])
		}
		if err != nil {
			return 0, err
		}
		tree, err := c.runTree(ctx, row, events.DefaultMaxDepth)
		if err != nil {
			return 0, err
		}
		if tree.Calls, err = c.client.Calls(ctx, row.ID); err != nil {
			return 0, err
		}
		allSteps, err := c.addSteps(ctx, &tree)
		if err != nil {
			return 0, err
		}
		if c.json {
			return ExitOK, c.printJSON(tree)
		}
		c.describe(row)
		c.describeTree(tree, allSteps)
		return ExitOK, nil
	}
}

// describe prints a row for people.
func (c *cli) describe(r *jetruntype.Run) {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	line("id", r.ID)
	line("agent type", r.AgentType)
	line("status", string(r.Status)+reasonSuffix(r.Reason))
	line("error", r.Error)
	line("summary", r.Summary)
	if p := r.Progress; p != nil {
		line("progress", fmt.Sprintf("%3.0f%% %s", p.Fraction*100, phaseMessage(p.Phase, p.Message)))
	}
	if r.Milestones > 0 {
		line("milestones", fmt.Sprintf("%d (last: %s)", r.Milestones, r.LastMilestone))
	}
	for _, kv := range usageLines(r) {
		line(kv[0], kv[1])
	}
	line("waiting for", r.WaitingFor)
	if r.Attempt > 0 {
		line("attempt", fmt.Sprint(r.Attempt))
	}
	line("worker", r.Worker)
	line("parent", r.Parent)
	line("forked from", forkedFrom(r.ForkedFrom)) // rerun.go
	line("created", stamp(r.CreatedAt))
	line("started", stamp(r.StartedAt))
	line("finished", stamp(r.FinishedAt))
	line("duration", runDuration(r, time.Now()))
	if len(r.Output) > 0 {
		line("output", string(r.Output))
	}
	_ = tw.Flush()
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

func phaseMessage(phase, msg string) string {
	switch {
	case phase != "" && msg != "":
		return phase + ": " + msg
	case phase != "":
		return phase
	}
	return msg
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

func (c *cli) lsCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	status := fs.String("status", "", "only runs in these statuses (comma-separated)")
	agentType := fs.String("type", "", "only runs of this agent type")
	parentID := fs.String("parent", "", "only children of this run")
	toolCall := fs.String("tool-call-id", "", "only runs dispatched by this tool call of their parent (parentToolCallId)")
	limit := fs.Int("limit", 50, "at most this many runs")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 0 {
			return 0, usagef("ls takes no arguments")
		}
		statuses, err := parseStatuses(*status)
		if err != nil {
			return 0, err
		}
		rows, err := c.client.List(ctx, statuses...)
		if err != nil {
			return 0, err
		}
		var out []*jetruntype.Run
		for _, r := range rows {
			if (*agentType == "" || r.AgentType == *agentType) && (*parentID == "" || r.Parent == *parentID) &&
				(*toolCall == "" || r.ParentToolCallID == *toolCall) {
				out = append(out, r)
			}
		}
		out = out[:min(len(out), max(*limit, 0))]
		if c.json {
			if out == nil {
				out = []*jetruntype.Run{}
			}
			return ExitOK, c.printJSON(out)
		}
		tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTYPE\tSTATUS\tPROGRESS\tMILESTONES\tCREATED")
		for _, r := range out {
			prog := ""
			if r.Progress != nil {
				prog = fmt.Sprintf("%.0f%%", r.Progress.Fraction*100)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.AgentType, string(r.Status)+reasonSuffix(r.Reason), prog,
				r.Milestones, stamp(r.CreatedAt))
		}
		return ExitOK, tw.Flush()
	}
}

func parseStatuses(s string) ([]events.Status, error) {
	out, err := wire.ParseStatuses(s)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return out, nil
}

func (c *cli) cancelCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	reason := fs.String("reason", "cancelled from the jetrun CLI", "why")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 1 {
			return 0, usagef("want one run id")
		}
		row, err := c.client.Cancel(ctx, args[0], *reason)
		if err != nil {
			return 0, err
		}
		if c.json {
			return ExitOK, c.printJSON(row)
		}
		state := string(row.Status)
		if !row.Status.Final() && row.CancelRequested {
			state = "cancel requested (its worker stops it)"
		}
		fmt.Fprintf(c.out, "%s: %s\n", row.ID, state)
		return ExitOK, nil
	}
}

func (c *cli) signalCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) < 2 || len(args) > 3 {
			return 0, usagef("want ID NAME [PAYLOAD]")
		}
		payload := json.RawMessage(`{}`)
		if len(args) == 3 {
			p, err := c.readJSONArg(args[2])
			if err != nil {
				return 0, err
			}
			payload = p
		}
		seq, err := c.client.Signal(ctx, args[0], args[1], payload)
		if err != nil {
			return 0, err
		}
		if c.json {
			return ExitOK, c.printJSON(map[string]any{"runId": args[0], "name": args[1], "seq": seq})
		}
		fmt.Fprintf(c.out, "signal %s sent to %s (seq %d)\n", args[1], args[0], seq)
		return ExitOK, nil
	}
}

func (c *cli) clearCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	status := fs.String("status", "", "clear runs in these statuses (comma-separated)")
	olderThan := fs.Duration("older-than", 0, "clear runs that finished longer ago than this (e.g. 24h)")
	all := fs.Bool("all", false, "clear every run")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 0 {
			return 0, usagef("clear takes no arguments")
		}
		statuses, err := parseStatuses(*status)
		if err != nil {
			return 0, err
		}
		n, err := c.client.Clear(ctx, parent.ClearFilter{Statuses: statuses, OlderThan: *olderThan, All: *all})
		if errors.Is(err, parent.ErrBadRequest) {
			return 0, usageError{err}
		}
		if err != nil {
			return 0, err
		}
		if c.json {
			return ExitOK, c.printJSON(map[string]int{"cleared": n})
		}
		fmt.Fprintf(c.out, "cleared %d runs\n", n)
		return ExitOK, nil
	}
}
