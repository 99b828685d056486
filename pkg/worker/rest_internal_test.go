package worker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Waiting runs cost the heart nothing per beat: once their dispatches are
// shelved the heart leaves them out of its beats (they rest), so its work
// per beat does not grow with the runs that wait. Before, it visited every
// run every beat (4 % of a core for 100,000 parked runs, make bench), and
// a waiting run's row sync could wait a lease. Whatever concerns a resting
// run wakes it at once: a cancel reaches its handler, progress reported
// from inside its park reaches its row, and a handler that leaves its park
// is beaten again.
func TestWaitingRunsRestAndWakeWhenConcerned(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A lease of 3 s: the heart beats every 500 ms; a run left resting
	// without a wake would wait restSweep (5 min), past this test's end.
	w, err := New(rt, Config{Lease: 3 * time.Second, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"idle-1", "idle-2", "idle-3", "cancel", "report", "leave"}
	report, leave := make(chan struct{}), make(chan struct{})
	left := make(chan struct{})
	w.Handle("waits", HandlerFunc(func(ctx context.Context, run *Run) (Result, error) {
		err := run.Park(ctx, func(ctx context.Context) error {
			switch run.ID() {
			case "report":
				select {
				case <-report:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				if err := run.Progress(ctx, Progress{Fraction: 0.5, Message: "half"}); err != nil {
					return err
				}
			case "leave":
				select {
				case <-leave:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			<-ctx.Done()
			return context.Cause(ctx)
		})
		if run.ID() == "leave" && err == nil {
			close(left)
			<-ctx.Done() // working, not parked
		}
		return Result{}, context.Cause(ctx)
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(); err != nil {
			t.Error(err)
		}
	}()
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := client.Dispatch(ctx, parent.Request{AgentType: "waits", RunID: id, Input: 1}); err != nil {
			t.Fatal(err)
		}
	}
	awake := func() []string {
		var out []string
		for _, e := range w.awakeRuns() {
			out = append(out, e.id)
		}
		slices.Sort(out)
		return out
	}
	natstest.Eventually(t, time.Minute, func() bool {
		return w.restingRuns() == len(ids) && len(awake()) == 0
	}, "the %d waiting runs do not all rest: %d rest, the heart beats %q", len(ids), w.restingRuns(), awake())

	// A cancel reaches the resting run's handler.
	if _, err := client.Cancel(ctx, "cancel", "test"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		row, err := client.Inspect(ctx, "cancel")
		return err == nil && row.Status == events.StatusAborted
	}, "the resting run's cancel did not end it")

	// Progress reported inside the park reaches the row within a few
	// beats, not at the next sweep.
	close(report)
	natstest.Eventually(t, 30*time.Second, func() bool {
		row, err := client.Inspect(ctx, "report")
		return err == nil && row.Progress != nil && row.Progress.Message == "half"
	}, "progress reported by a resting run did not reach its row")

	// A handler that leaves its park is beaten again, and stays awake.
	close(leave)
	<-left
	natstest.Eventually(t, 30*time.Second, func() bool {
		return slices.Contains(awake(), "leave")
	}, "the run that left its park is not beaten: the heart beats %q", awake())
	if got := w.restingRuns(); got != 3 && got != 4 {
		t.Fatalf("%d runs rest; want the 3 idle ones (and report's, once its row is synced)", got)
	}
}
