package jetruncli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// drainAfterEnd bounds how long --wait keeps reading events once the row
// says the run ended while the replay has not reached the run's end yet
// (its final status event is normally stored a moment after the row), so
// the timeline shown is complete. A replay that reached the end returns at
// once.
const drainAfterEnd = 2 * time.Second

func (c *cli) dispatchCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	wait := fs.Bool("wait", false, "wait for the outcome, showing progress live; the exit code reflects it")
	runID := fs.String("run-id", "", "the run id (default: a new random one); the same id never runs twice")
	parentID := fs.String("parent", "", "the run that dispatches this one")
	toolCall := fs.String("tool-call-id", "", "the parent's tool call that dispatches this run (parentToolCallId)")
	onFinish := fs.String("on-finish", "", "make the run detached with this finish handler")
	key := fs.String("key", "", "a concurrency key: runs under one key never run at once (say a chat session)")
	strategy := fs.String("strategy", "", "with --key, what this run does while the key is busy: queue (default), latest, drop, debounce, merge")
	debounce := fs.Duration("debounce", 0, "with --strategy debounce, the quiet window (default 750ms)")
	session := fs.String("session", "", "a sub-agent session: the run sees the earlier turns of its agent type under this key as its history")
	onMilestones := fs.String("on-milestones", "", "with --on-finish: milestone names, comma-separated, the handler also hears (once each)")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 2 {
			return 0, usagef("want TYPE INPUT")
		}
		input, err := c.readJSONArg(args[1])
		if err != nil {
			return 0, err
		}
		req := parent.Request{AgentType: args[0], RunID: *runID, Input: input, Parent: *parentID,
			ParentToolCallID: *toolCall, ConcurrencyKey: *key, Strategy: events.Strategy(*strategy), Debounce: *debounce,
			Session: *session}
		if *parentID != "" {
			p, err := c.client.Inspect(ctx, *parentID)
			if errors.Is(err, parent.ErrRunNotFound) {
				return 0, fmt.Errorf("no parent run %q", *parentID)
			}
			if err != nil {
				return 0, err
			}
			req.Depth = p.Depth + 1
		}
		if *onFinish != "" || *onMilestones != "" {
			req.Detached = &events.Detached{OnFinish: *onFinish}
			if *onMilestones != "" {
				req.Detached.OnMilestones = strings.Split(*onMilestones, ",")
			}
		}
		d, err := c.client.Dispatch(ctx, req)
		if errors.Is(err, parent.ErrBadRequest) || errors.Is(err, parent.ErrUnknownAgentType) {
			return 0, usageError{err}
		}
		if err != nil {
			return 0, err
		}
		row := d.Run
		if !*wait {
			if c.json {
				return ExitOK, c.printJSON(row)
			}
			fmt.Fprintf(c.out, "%s dispatched (%s, %s)\n", row.ID, row.AgentType, row.Status)
			return ExitOK, nil
		}
		return c.follow(ctx, row.ID)
	}
}

// follow shows a run's events until it ends and returns the exit code of
// its outcome.
func (c *cli) follow(ctx context.Context, id string) (int, error) {
	r := newRenderer(c.out, isTerminal(c.out) && !c.json)
	if !c.json {
		r.note(fmt.Sprintf("run %s — Ctrl-C stops watching, not the run", id))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seq, err := c.client.Replay(ctx, id, parent.ReplayOptions{})
	if err != nil {
		return 0, err
	}
	evs := make(chan events.Event)
	replayDone := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait() // the goroutines below end with ctx
	defer cancel()
	wg.Go(func() {
		defer close(evs)
		for ev, err := range seq {
			if err != nil {
				replayDone <- err
				return
			}
			select {
			case evs <- ev:
			case <-ctx.Done():
				return
			}
		}
		replayDone <- nil
	})
	type outcome struct {
		res *parent.Result
		err error
	}
	awaited := make(chan outcome, 1)
	wg.Go(func() {
		res, err := c.client.Await(ctx, id)
		awaited <- outcome{res, err}
	})

	// The outcome is printed once the row is final and the replay reached
	// the run's end (its final status event), or drain after the row, at
	// most, when the replay does not get there.
	var (
		drain                 <-chan time.Time
		rowFinal, replayEnded bool
		stream                = evs // evs turns nil once the replay ended
	)
	for {
		if rowFinal && replayEnded {
			cancel()
			for range stream { // let the replay goroutine finish
			}
			return c.finish(id, r)
		}
		select {
		case ev, open := <-evs:
			if !open {
				evs, replayEnded = nil, true
				continue
			}
			if !c.json {
				r.event(ev)
			}
		case o := <-awaited:
			if o.err != nil && !isFailure(o.err) {
				r.clear()
				if ctx.Err() != nil {
					return 0, fmt.Errorf("%w watching %s; the run goes on (jetrun get %s)", errStopped, id, id)
				}
				return 0, o.err
			}
			awaited, rowFinal = nil, true
			drain = time.After(c.drainAfterEnd())
		case <-drain:
			replayEnded = true // the rest of the timeline is not coming
		case err := <-replayDone:
			if err != nil && ctx.Err() == nil {
				r.note("(timeline unavailable: " + err.Error() + "; still waiting for the outcome)")
			}
			replayDone = nil
		case <-ctx.Done():
			r.clear()
			return 0, fmt.Errorf("%w watching %s; the run goes on (jetrun get %s)", errStopped, id, id)
		}
	}
}

func isFailure(err error) bool {
	var f *parent.Failure
	return errors.As(err, &f)
}

// finish prints the outcome and maps it to an exit code.
func (c *cli) finish(id string, r *renderer) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row, err := c.client.Inspect(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("read the outcome of %s: %v", id, err)
	}
	code := exitCode(row.Status)
	if c.json {
		return code, c.printJSON(row)
	}
	r.clear()
	took := ""
	if !row.StartedAt.IsZero() && !row.FinishedAt.IsZero() {
		took = " in " + row.FinishedAt.Sub(row.StartedAt).Round(time.Millisecond).String()
	}
	switch row.Status {
	case events.StatusCompleted:
		fmt.Fprintf(c.out, "✔ %s completed%s: %s\n", id, took, row.Summary)
		if len(row.Output) > 0 {
			fmt.Fprintf(c.out, "output: %s\n", row.Output)
		}
	default:
		fmt.Fprintf(c.out, "✘ %s %s%s%s: %s\n", id, row.Status, reasonSuffix(row.Reason), took, row.Error)
	}
	return code, nil
}

func exitCode(s events.Status) int {
	switch s {
	case events.StatusCompleted:
		return ExitOK
	case events.StatusError:
		return ExitRunError
	case events.StatusAborted:
		return ExitRunAborted
	case events.StatusInterrupted:
		return ExitInterrupted
	}
	return ExitFailure
}

func (c *cli) replayCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	follow := fs.Bool("follow", false, "after the history, follow the run live until it ends")
	after := fs.Uint64("after", 0, "start after this stream sequence (resume)")
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 1 {
			return 0, usagef("want one run id")
		}
		mode := events.HistoryOnly
		if *follow {
			mode = events.UntilEnd
		}
		seq, err := c.client.Replay(ctx, args[0], parent.ReplayOptions{After: *after, Follow: mode})
		if err != nil {
			return 0, err
		}
		enc := json.NewEncoder(c.out)
		var first time.Time
		for ev, err := range seq {
			if err != nil {
				return 0, err
			}
			if c.json {
				if err := enc.Encode(ev); err != nil {
					return 0, err
				}
				continue
			}
			if first.IsZero() {
				first = ev.Time
			}
			fmt.Fprintf(c.out, "#%-6d %+9.3fs  %s\n", ev.Seq, ev.Time.Sub(first).Seconds(), describeEvent(ev))
		}
		return ExitOK, nil
	}
}

// describeEvent is one timeline line.
func describeEvent(ev events.Event) string {
	switch {
	case ev.Status != nil:
		s := ev.Status
		text := fmt.Sprintf("status     %s%s", s.Status, reasonSuffix(s.Reason))
		if s.Status == events.StatusRunning {
			text += fmt.Sprintf(" (attempt %d, worker %s)", s.Attempt, s.Worker)
		}
		if s.Status == events.StatusInterrupted && !s.ChildStillRunning {
			text += " child stopped"
		}
		if s.Error != "" {
			text += ": " + s.Error
		}
		return text
	case ev.Chunk != nil:
		return fmt.Sprintf("chunk %-4d %s", ev.Chunk.Seq, printable(strings.TrimRight(chunkText(ev.Chunk.Data), "\n")))
	case ev.Progress != nil:
		return fmt.Sprintf("progress   %3.0f%% %s", ev.Progress.Fraction*100, phaseMessage(ev.Progress.Phase, ev.Progress.Message))
	case ev.Milestone != nil:
		return fmt.Sprintf("milestone  #%d %s", ev.Milestone.Sequence, ev.Milestone.Name)
	case ev.Step != nil:
		return "step       " + stepOf(*ev.Step).describe()
	case ev.Signal != nil:
		text := fmt.Sprintf("signal     %s %s", ev.Signal.Name, ev.Signal.State)
		if len(ev.Signal.Payload) > 0 {
			text += " " + string(ev.Signal.Payload)
		}
		return text
	}
	return fmt.Sprintf("%-10s %s", ev.Kind, ev.Data)
}

// chunkText renders chunk data: a JSON string as its text, anything else as
// JSON.
func chunkText(data json.RawMessage) string {
	var s string
	if json.Unmarshal(data, &s) == nil {
		return s
	}
	return string(data)
}

// printable drops control characters (escape sequences a run's output may
// carry) except newlines and tabs.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return -1
	}, s)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// renderer shows a run's events: on a terminal with a live progress bar
// redrawn in place, elsewhere as plain lines.
type renderer struct {
	w        io.Writer
	tty      bool
	bar      string // the progress line currently drawn (tty)
	fraction float64
	phase    string
	message  string
	lastPct  int
	id       string
}

func newRenderer(w io.Writer, tty bool) *renderer { return &renderer{w: w, tty: tty, lastPct: -1} }

// note prints a line above the progress bar.
func (r *renderer) note(text string) {
	r.clear()
	fmt.Fprintln(r.w, text)
	r.draw()
}

func (r *renderer) clear() {
	if r.tty && r.bar != "" {
		fmt.Fprint(r.w, "\r\x1b[2K")
		r.bar = ""
	}
}

func (r *renderer) draw() {
	if !r.tty || (r.fraction == 0 && r.phase == "" && r.message == "") {
		return
	}
	const width = 30
	filled := int(r.fraction*width + 0.5)
	r.bar = fmt.Sprintf("[%s%s] %3.0f%%  %s", strings.Repeat("█", filled), strings.Repeat("░", width-filled),
		r.fraction*100, phaseMessage(r.phase, r.message))
	fmt.Fprint(r.w, "\r\x1b[2K"+r.bar)
}

func (r *renderer) event(ev events.Event) {
	r.id = ev.RunID
	switch {
	case ev.Progress != nil:
		p := ev.Progress
		r.fraction, r.phase, r.message = p.Fraction, p.Phase, p.Message
		if r.tty {
			r.draw()
			return
		}
		if pct := int(p.Fraction * 100); pct != r.lastPct {
			r.lastPct = pct
			fmt.Fprintf(r.w, "progress %3d%% %s\n", pct, phaseMessage(p.Phase, p.Message))
		}
	case ev.Chunk != nil:
		r.note(printable(strings.TrimRight(chunkText(ev.Chunk.Data), "\n")))
	case ev.Milestone != nil:
		r.note("✓ " + ev.Milestone.Name)
	case ev.Step != nil:
		r.note("▣ step " + stepOf(*ev.Step).describe())
	case ev.Status != nil:
		s := ev.Status
		switch {
		case s.Status == events.StatusRunning && s.Attempt > 1:
			r.note(fmt.Sprintf("↻ taken over by %s (attempt %d)", s.Worker, s.Attempt))
		case s.Status == events.StatusRunning:
			r.note("▶ running on " + s.Worker)
		case s.Status == events.StatusInterrupted:
			r.note(fmt.Sprintf("⚠ given up (%s): %s", s.Reason, s.Error))
		}
	case ev.Signal != nil && ev.Signal.State == events.SignalWaiting:
		r.note(fmt.Sprintf("⏸ waiting for signal %q — send it with: jetrun signal %s %s '{...}'", ev.Signal.Name, r.id, ev.Signal.Name))
	case ev.Signal != nil:
		r.note(fmt.Sprintf("▶ signal %s received", ev.Signal.Name))
	}
}
