package eventline_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker/workertest"
)

// Usage lines right before a step line are the step's, stored with it
// along with the step line's own usage; a usage line followed by any other
// line, or by nothing for UsageHold, is the run's, and the step line after
// it stores none.
func TestUsageLinesBeforeAStepLineAreTheSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		run := workertest.NewRun(workertest.Config{})
		ap := eventline.NewApplier(run.Handle())
		apply := func(line string) {
			t.Helper()
			ev, err := eventline.Parse(1, []byte(line))
			if err != nil {
				t.Fatal(err)
			}
			if err := ap.Apply(ctx, ev); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		}
		apply(`{"usage":{"inputTokens":30,"model":"m1"}}`)
		apply(`{"usage":{"inputTokens":10,"model":"m1"}}`)
		apply(`{"step":{"name":"plan-1","output":1,"usage":{"outputTokens":2,"model":"m1"}}}`)
		apply(`{"usage":{"inputTokens":5}}`)
		apply(`{"chunk":"thinking"}`)
		apply(`{"step":{"name":"plan-2","output":2}}`)
		apply(`{"usage":{"inputTokens":7}}`)
		time.Sleep(eventline.UsageHold + time.Millisecond)
		synctest.Wait()
		apply(`{"step":{"name":"plan-3","output":3}}`)
		if err := ap.Close(ctx); err != nil {
			t.Fatal(err)
		}
		steps := run.Steps()
		if len(steps) != 3 {
			t.Fatalf("steps %+v", steps)
		}
		want := events.UsageTotals{InputTokens: 40, OutputTokens: 2}
		if u := steps[0].Usage; u == nil || u.UsageTotals != want || u.Models["m1"] != want {
			t.Errorf("plan-1 usage %+v; want %+v on m1", u, want)
		}
		for _, st := range steps[1:] {
			if st.Usage != nil {
				t.Errorf("%s usage %+v; want none: the usage line before it was the run's", st.Name, st.Usage)
			}
		}
	})
}
