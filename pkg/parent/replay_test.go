package parent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// chunky streams n chunks (its input) as fast as it can.
var chunky = worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
	var n int
	if err := json.Unmarshal(run.Input(), &n); err != nil {
		return worker.Result{}, err
	}
	for i := 1; i <= n; i++ {
		if err := run.Chunk(ctx, fmt.Sprintf("line %d", i)); err != nil {
			return worker.Result{}, err
		}
	}
	return worker.Result{Summary: "streamed"}, nil
})

func setupReplay(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	jetruntest.StartWorker(t, b.rt, worker.Config{}, func(w *worker.Worker) { w.Handle("chunky", chunky) })
	return b
}

// collect replays run id and checks each event belongs to it; it returns
// the chunk sequence numbers and where to resume: the last stream sequence
// seen, or the one before a coalesced chunk event left midway. stopAfter
// > 0 stops after that many chunks (a client that goes away); skip drops
// the chunks up to it (a resumed client has them).
func collect(t *testing.T, c *parent.Client, id string, after uint64, stopAfter int, skip int64) (chunks []int64, last uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seq, err := c.Replay(ctx, id, parent.ReplayOptions{After: after})
	if err != nil {
		t.Fatal(err)
	}
	var prev uint64
	prevPart := -1
	for ev, err := range seq {
		if err != nil {
			t.Fatalf("replay %s: %v", id, err)
		}
		if ev.RunID != id {
			t.Fatalf("replay of %s yielded an event of %s", id, ev.RunID)
		}
		if ev.Seq < prev || ev.Seq == prev && ev.Part != prevPart+1 || ev.Seq > prev && ev.Part != 0 {
			t.Fatalf("stream sequence went from %d/%d to %d/%d", prev, prevPart, ev.Seq, ev.Part)
		}
		prev, prevPart, last = ev.Seq, ev.Part, ev.Seq
		if !ev.LastPart() {
			last = ev.Seq - 1 // resuming goes back to the coalesced event's start
		}
		if ev.Chunk != nil {
			if ev.Chunk.Seq <= skip {
				continue // a resumed reader has it already
			}
			chunks = append(chunks, ev.Chunk.Seq)
			if stopAfter > 0 && len(chunks) == stopAfter {
				return chunks, last
			}
		}
	}
	return chunks, last
}

func checkOneToN(t *testing.T, got []int64, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%d chunks, want %d", len(got), n)
	}
	for i, s := range got {
		if s != int64(i+1) {
			t.Fatalf("chunk %d has seq %d: not every chunk exactly once and in order", i, s)
		}
	}
}

func TestReplayOf10000ChunksIsExactAndInOrder(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	ctx := t.Context()
	const n = 10_000
	// A neighbour streams at the same time: its events must never show up.
	for _, id := range []string{"big", "neighbour"} {
		if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "chunky", RunID: id, Input: n}); err != nil {
			t.Fatal(err)
		}
	}
	// Start mid-run.
	jetruntest.WaitRow(t, b.store, "big", 30*time.Second, func(r *model.Row) bool { return r.Chunks > 100 })
	var wg sync.WaitGroup
	results := make([][]int64, 2)
	wg.Go(func() { results[0], _ = collect(t, b.client, "big", 0, 0, 0) })
	// And a client that drops off after 3,000 chunks and resumes from the
	// last sequence it saw.
	wg.Go(func() {
		first, last := collect(t, b.client, "big", 0, 3000, 0)
		rest, _ := collect(t, b.client, "big", last, 0, first[len(first)-1])
		results[1] = append(first, rest...)
	})
	wg.Wait()
	checkOneToN(t, results[0], n)
	checkOneToN(t, results[1], n)

	// Once the run ended, a replay is the same story.
	jetruntest.WaitRow(t, b.store, "big", 30*time.Second, jetruntest.Final)
	after, _ := collect(t, b.client, "big", 0, 0, 0)
	checkOneToN(t, after, n)
}

func TestReplayHistoryOnlyAndUnknownRuns(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	ctx := t.Context()
	if _, err := b.client.Replay(ctx, "nope", parent.ReplayOptions{Follow: events.HistoryOnly}); !errors.Is(err, runstore.ErrRunNotFound) {
		t.Fatalf("replay of an unknown run: %v", err)
	}
	if _, err := b.client.Run(ctx, parent.Request{AgentType: "demo", RunID: "short", Input: map[string]int{"steps": 3, "stepMs": 250}}); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	natstest.Eventually(t, 10*time.Second, func() bool {
		kinds = kinds[:0]
		seq, err := b.client.Replay(ctx, "short", parent.ReplayOptions{Follow: events.HistoryOnly})
		if err != nil {
			t.Fatal(err)
		}
		for ev, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, ev.Kind)
		}
		return len(kinds) > 0 && kinds[len(kinds)-1] == events.KindStatus && len(kinds) > 2
	}, "no complete history")
	if got := strings.Join(kinds, " "); got != "status step chunk milestone progress step chunk milestone progress step chunk milestone progress status" {
		t.Fatalf("history = %s", got)
	}
}

func TestAwaitMilestone(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	ctx := t.Context()
	if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: "ms", Input: map[string]int{"steps": 4, "stepMs": 150}}); err != nil {
		t.Fatal(err)
	}
	m, err := b.client.AwaitMilestone(ctx, "ms", "step-2")
	if err != nil || m.Sequence != 2 {
		t.Fatalf("step-2: %+v %v", m, err)
	}
	// Already reached: answered from history.
	jetruntest.WaitRow(t, b.store, "ms", 10*time.Second, jetruntest.Final)
	if m, err := b.client.AwaitMilestone(ctx, "ms", "step-1"); err != nil || m.Sequence != 1 {
		t.Fatalf("step-1 after the end: %+v %v", m, err)
	}
	if _, err := b.client.AwaitMilestone(ctx, "ms", "step-9"); !errors.Is(err, parent.ErrMilestoneNotReached) {
		t.Fatalf("missing milestone: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: "slowms", Input: map[string]int{"steps": 2, "stepMs": 5000}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.AwaitMilestone(short, "slowms", "step-2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("context end: %v", err)
	}
	_, _ = b.client.Cancel(ctx, "slowms", "")
}

// A replay restricted to progress and milestones, begun with the run,
// follows them live and ends with the run.
func TestReplayOfKindsFollowsProgressAndMilestones(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	ctx := t.Context()
	if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: "watched", Input: map[string]int{"steps": 4, "stepMs": 250}}); err != nil {
		t.Fatal(err)
	}
	seq, err := b.client.Replay(ctx, "watched", parent.ReplayOptions{Kinds: []string{events.KindProgress, events.KindMilestone}})
	if err != nil {
		t.Fatal(err)
	}
	var progress, milestones int
	for ev, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Progress != nil:
			progress++
		case ev.Milestone != nil:
			milestones++
		default:
			t.Fatalf("replay of progress and milestones yielded a %s event", ev.Kind)
		}
	}
	if progress == 0 || milestones != 4 {
		t.Fatalf("replay saw %d progress and %d milestones; want some and 4", progress, milestones)
	}
	if row, err := b.client.Inspect(ctx, "watched"); err != nil || !row.Final() {
		t.Fatalf("the replay ended before the run: %+v %v", row, err)
	}
}

func TestSignals(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	ctx := t.Context()

	t.Run("sent before the handler waits", func(t *testing.T) {
		if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: "early",
			Input: map[string]int{"steps": 3, "stepMs": 300, "approveAt": 3}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.client.Signal(ctx, "early", demo.ApprovalSignal, map[string]bool{"approved": true}); err != nil {
			t.Fatal(err)
		}
		res, err := b.client.Await(ctx, "early")
		if err != nil || res.Summary != "finished 3 steps" {
			t.Fatalf("await: %+v %v", res, err)
		}
	})

	t.Run("sent while the handler waits", func(t *testing.T) {
		if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: "parked",
			Input: map[string]int{"steps": 2, "stepMs": 10, "approveAt": 1}}); err != nil {
			t.Fatal(err)
		}
		row := jetruntest.WaitRow(t, b.store, "parked", 10*time.Second, func(r *model.Row) bool { return r.WaitingFor != "" })
		if row.WaitingFor != demo.ApprovalSignal || row.Status != events.StatusRunning {
			t.Fatalf("parked row: %+v", row)
		}
		if _, err := b.client.Signal(ctx, "parked", demo.ApprovalSignal, json.RawMessage(`{"approved":true,"by":"alice"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.client.Await(ctx, "parked"); err != nil {
			t.Fatal(err)
		}
		final := jetruntest.WaitRow(t, b.store, "parked", 10*time.Second, func(r *model.Row) bool { return r.WaitingFor == "" })
		if final.SignalsSeen[demo.ApprovalSignal] == 0 {
			t.Fatalf("signal not recorded: %+v", final)
		}
		var states []string
		seq, _ := b.client.Replay(ctx, "parked", parent.ReplayOptions{Follow: events.HistoryOnly, Kinds: []string{events.KindSignal}})
		for ev, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, ev.Signal.State)
		}
		if fmt.Sprint(states) != "[waiting received]" {
			t.Fatalf("signal events %v", states)
		}
	})

	t.Run("a rejection ends the run", func(t *testing.T) {
		if _, err := b.client.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: "rejected",
			Input: map[string]int{"steps": 2, "stepMs": 10, "approveAt": 2}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.client.Signal(ctx, "rejected", demo.ApprovalSignal, map[string]any{"approved": false, "reason": "too risky"}); err != nil {
			t.Fatal(err)
		}
		_, err := b.client.Await(ctx, "rejected")
		var f *parent.Failure
		if !errors.As(err, &f) || !strings.Contains(f.Message, "not approved: too risky") {
			t.Fatalf("await: %v", err)
		}
	})

	t.Run("bad signals", func(t *testing.T) {
		if _, err := b.client.Signal(ctx, "ghost", "approve", 1); !errors.Is(err, runstore.ErrRunNotFound) {
			t.Fatalf("unknown run: %v", err)
		}
		if _, err := b.client.Signal(ctx, "early", "a.b", 1); !errors.Is(err, parent.ErrBadRequest) {
			t.Fatalf("bad name: %v", err)
		}
	})
}

// A run id cleared and dispatched again starts a fresh run, and the old
// run's signals do not reach it.
func TestARecreatedRunStartsAfreshWithoutOldSignals(t *testing.T) {
	t.Parallel()
	b := setupReplay(t)
	ctx := t.Context()
	req := parent.Request{AgentType: "demo", RunID: "again", Input: map[string]int{"steps": 1, "stepMs": 0, "approveAt": 1}}
	if _, err := b.client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Signal(ctx, "again", "approve", map[string]string{"from": "the first run"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Await(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.client.Clear(ctx, parent.ClearFilter{Statuses: []events.Status{events.StatusCompleted}}); err != nil || n != 1 {
		t.Fatalf("clear: %d %v", n, err)
	}
	if _, err := b.client.Dispatch(ctx, req); err != nil {
		t.Fatal(err)
	}
	// The new run waits for its own approval.
	row := jetruntest.WaitRow(t, b.store, "again", 10*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" })
	if row.Status != events.StatusRunning {
		t.Fatalf("row: %+v", row)
	}
	if _, err := b.client.Signal(ctx, "again", "approve", map[string]string{"from": "the second run"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Await(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Signal(ctx, "again", "approve", 1); !errors.Is(err, parent.ErrRunEnded) {
		t.Fatalf("signal to an ended run: %v", err)
	}
}
