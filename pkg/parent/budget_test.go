package parent

import (
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// An Await reads its row when nextRead says (nothing wakes it here: no
// status event), and gives up within a tenth of its budget or 100 ms,
// whichever is larger, past it: the window from the start, the no-progress
// budget from the run's last progress. Issue 23: a 1 s window gave up
// after 5 s, and a no-progress budget was overrun by up to half of it.
func TestBudgetsAreHonouredWithinATenth(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name               string
		window, noProgress time.Duration
		progressUntil      time.Duration // the run progresses now and then until then
		want               string        // the reason it is given up with
	}{
		{"window 1s", time.Second, DefaultReattachNoProgress, time.Hour, events.ReasonWindowExceeded},
		{"window 1s, no other budget", time.Second, -1, time.Hour, events.ReasonWindowExceeded},
		{"window 30s", 30 * time.Second, -1, time.Hour, events.ReasonWindowExceeded},
		{"no progress 1s", 0, time.Second, 3700 * time.Millisecond, events.ReasonNoProgress},
		{"no progress 300ms", 0, 300 * time.Millisecond, 1010 * time.Millisecond, events.ReasonNoProgress},
		{"no progress 2m", 0, 2 * time.Minute, 7 * time.Minute, events.ReasonNoProgress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := reattachBudget{began: t0, noProgress: tc.noProgress, window: tc.window}
			row := &model.Row{ID: "r", Status: events.StatusRunning}
			// The run shows progress every 70 ms until progressUntil.
			const step = 70 * time.Millisecond
			due, slack := tc.window, max(tc.window/10, budgetSlack)
			if tc.want == events.ReasonNoProgress {
				due, slack = tc.progressUntil/step*step+tc.noProgress, max(tc.noProgress/10, budgetSlack)
			}
			for now, reads := t0, 0; ; reads++ {
				if reads > 100_000 {
					t.Fatal("never given up")
				}
				at := now.Sub(t0)
				row.Chunks = int64(min(at, tc.progressUntil) / step)
				if f := b.check(row, now); f != nil {
					if f.Reason != tc.want || at < due || at > due+slack {
						t.Fatalf("given up %s after %s; want %s between %s and %s", f.Reason, at, tc.want, due, due+slack)
					}
					t.Logf("given up %s after %s (%d reads)", f.Reason, at, reads+1)
					return
				}
				now = now.Add(b.nextRead(now))
			}
		})
	}
}
