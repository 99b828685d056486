package jetruncli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// stepLine is a durable step as `jetrun get` shows it: its name, when it
// was stored, by which attempt, and its output's size (not the output).
type stepLine struct {
	Name       string        `json:"name"`
	At         time.Time     `json:"at"`
	Attempt    int           `json:"attempt"`
	Bytes      int           `json:"bytes"`
	DurationMs int64         `json:"durationMs,omitempty"`
	Error      string        `json:"error,omitempty"`
	Usage      *events.Usage `json:"usage,omitempty"`
	GivenFrom  string        `json:"givenFrom,omitempty"`
}

func stepOf(st events.Step) stepLine {
	l := stepLine{Name: st.Name, At: st.At, Attempt: st.Attempt, DurationMs: st.DurationMs, Error: st.Error, Usage: st.Usage, GivenFrom: st.GivenFrom}
	if st.Error == "" {
		l.Bytes = len(st.Output)
	}
	return l
}

// steps returns the run's stored steps.
func (c *cli) steps(ctx context.Context, id string) ([]stepLine, error) {
	stored, err := c.client.Steps(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]stepLine, 0, len(stored))
	for _, st := range stored {
		out = append(out, stepOf(st))
	}
	return out, nil
}

// describe renders a step in one line: "plan-1  412 B  1.2s  attempt 1",
// with what it spent when it reported usage.
func (l stepLine) describe() string {
	parts := []string{l.Name}
	if l.Error != "" {
		parts = append(parts, "failed: "+l.Error)
	} else {
		parts = append(parts, fmt.Sprintf("%d B", l.Bytes))
	}
	if l.DurationMs > 0 {
		parts = append(parts, (time.Duration(l.DurationMs) * time.Millisecond).String())
	}
	if l.Usage != nil {
		parts = append(parts, totals(l.Usage.UsageTotals))
	}
	if l.GivenFrom != "" {
		parts = append(parts, "given from "+l.GivenFrom)
	} else {
		parts = append(parts, fmt.Sprintf("attempt %d", l.Attempt))
	}
	return strings.Join(parts, "  ")
}

func (c *cli) describeSteps(steps []stepLine) {
	if len(steps) == 0 {
		return
	}
	fmt.Fprintln(c.out, "steps")
	for _, l := range steps {
		fmt.Fprintf(c.out, "  %s  %s\n", stamp(l.At), l.describe())
	}
}
