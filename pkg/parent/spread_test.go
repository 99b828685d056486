package parent_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/meter"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// With run events spread over three streams, every role works as with one:
// runs complete and Await wakes (the status follower on every stream), a
// replay reads each run's chunks and milestones, steps are read back, calls
// are answered (a call server's consumer on every stream), a
// cancel reaches the worker (its cancel follower on every stream), the
// finishes and milestone notices of detached runs are delivered, the
// meter meters every finish (one consumer per stream), Clear erases a run's
// events from its stream; and each stream stores only its own runs.
func TestRunsOverThreeEventsStreams(t *testing.T) {
	t.Parallel()
	const n = 3
	nc, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{Streams: events.StreamOptions{EventsStreams: n}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		metered = map[string]events.Status{}
	)
	m, err := meter.New(rt, meter.Config{OnFinish: func(_ context.Context, u meter.Usage) error {
		mu.Lock()
		defer mu.Unlock()
		metered[u.RunID] = u.Status
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	w, err := worker.New(rt, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("spread", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		for i := range 3 {
			if err := run.Chunk(ctx, i); err != nil {
				return worker.Result{}, err
			}
		}
		if _, err := run.Step(ctx, "once", func(context.Context) (any, error) { return run.ID(), nil }); err != nil {
			return worker.Result{}, err
		}
		out, err := run.Call(ctx, "echo", run.ID())
		if err != nil || string(out) != `"`+run.ID()+`"` {
			return worker.Result{}, fmt.Errorf("call: %s, %w", out, err)
		}
		if _, err := run.Milestone(ctx, "done", nil); err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: run.ID()}, nil
	})
	w.HandleFunc("hold", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		<-ctx.Done()
		return worker.Result{}, ctx.Err()
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}

	calls, err := client.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	calls.HandleFunc("echo", func(_ context.Context, call *parent.Call) (any, error) { return call.Input, nil })
	if err := calls.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer calls.Stop()

	finished, noticed := make(chan string, 12), make(chan string, 12)
	d, err := finish.New(rt, finish.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.HandleFunc("audit", func(_ context.Context, run *jetruntype.Run, _ finish.Result) error {
		finished <- run.ID
		return nil
	})
	d.HandleMilestoneFunc("audit", func(_ context.Context, run *jetruntype.Run, _ finish.Notice) error {
		noticed <- run.ID
		return nil
	})
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()

	var reqs []parent.Request
	for i := range 12 {
		reqs = append(reqs, parent.Request{AgentType: "spread", RunID: fmt.Sprintf("sp-%d", i), Input: i})
	}
	// Detached runs: their finishes (the finisher's core subscription on
	// the republished status events) and milestone notices (a consumer on
	// every stream) are delivered.
	for i := range 6 {
		id := fmt.Sprintf("sp-detached-%d", i)
		if _, err := client.Dispatch(ctx, parent.Request{AgentType: "spread", RunID: id, Input: i,
			Detached: &events.Detached{OnFinish: "audit", OnMilestones: []string{"done"}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []chan string{finished, noticed} {
		got := map[string]bool{}
		for len(got) < 6 {
			select {
			case id := <-ch:
				got[id] = true
			case <-ctx.Done():
				t.Fatalf("delivered %v of 6 detached runs", got)
			}
		}
	}
	for _, o := range client.RunAll(ctx, reqs) {
		if o.Err != nil || o.Result.Summary != o.RunID {
			t.Fatalf("run %s: %+v, %v", o.RunID, o.Result, o.Err)
		}
	}
	for _, r := range reqs {
		seq, err := client.Replay(ctx, r.RunID, parent.ReplayOptions{Follow: events.HistoryOnly})
		if err != nil {
			t.Fatal(err)
		}
		var chunks, milestones int
		for ev, err := range seq {
			if err != nil {
				t.Fatalf("replay %s: %v", r.RunID, err)
			}
			if ev.RunID != r.RunID {
				t.Fatalf("replay of %s yields %s's event", r.RunID, ev.RunID)
			}
			switch ev.Kind {
			case events.KindChunk:
				chunks++
			case events.KindMilestone:
				milestones++
			}
		}
		if chunks != 3 || milestones != 1 {
			t.Fatalf("replay %s: %d chunks, %d milestones", r.RunID, chunks, milestones)
		}
		steps, err := client.Steps(ctx, r.RunID)
		if err != nil || len(steps) != 1 {
			t.Fatalf("steps of %s: %v, %v", r.RunID, steps, err)
		}
	}

	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "hold", RunID: "held", Input: 0}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		row, err := client.Inspect(ctx, "held")
		return err == nil && row.Status == events.StatusRunning
	}, "held run never ran")
	if _, err := client.Cancel(ctx, "held", "test"); err != nil {
		t.Fatal(err)
	}
	res, err := client.Await(ctx, "held")
	var f *parent.Failure
	if !errors.As(err, &f) || f.Status != events.StatusAborted {
		t.Fatalf("cancelled run: %+v, %v", res, err)
	}

	natstest.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(metered) == len(reqs)+6+1
	}, "the meter did not meter every finish")

	ns := wire.Namespace("")
	for p, name := range ns.EventsStreams(n) {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		runs := map[string]bool{}
		for subject := range info.State.Subjects {
			id, _, err := ns.ParseRunSubject(subject)
			if err != nil || wire.Partition(id, n) != p {
				t.Fatalf("%s stores %s", name, subject)
			}
			runs[id] = true
		}
		if len(runs) == 0 {
			t.Errorf("%s stores no run", name)
		}
		t.Logf("%s: %d runs, %d events", name, len(runs), info.State.Msgs)
	}

	if _, err := client.Clear(ctx, parent.ClearFilter{Statuses: []events.Status{events.StatusAborted}}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, ns.EventsStreamFor("held", n))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLastMsgForSubject(ctx, ns.RunWildcard("held")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a cleared run's events: %v", err)
	}
	if _, err := client.Inspect(ctx, "held"); !errors.Is(err, parent.ErrRunNotFound) && (err == nil || !strings.Contains(err.Error(), "not found")) {
		t.Fatalf("a cleared run's row: %v", err)
	}
}
