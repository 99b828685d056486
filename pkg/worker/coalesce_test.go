package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// streamer emits n chunks "c<seq>" as fast as it can, then ends.
func streamer(n int) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		for i := 1; i <= n; i++ {
			if err := run.Chunk(ctx, fmt.Sprintf("c%d", i)); err != nil {
				return worker.Result{}, err
			}
		}
		if _, err := run.Milestone(ctx, "streamed", nil); err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: "streamed"}, nil
	})
}

// replayChunks follows run id from its start until it ends and returns its
// chunks in the order yielded, checking the stream positions only go on.
func replayChunks(t *testing.T, b *bundle, id string) []events.Chunk {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []events.Chunk
	var prev uint64
	prevPart := -1
	for ev, err := range wire.Replay(ctx, b.js, wire.Namespace(events.Namespace("")), id, events.ReplayOptions{}) {
		if err != nil {
			t.Errorf("replay %s: %v", id, err)
			return out
		}
		if ev.Seq < prev || ev.Seq == prev && ev.Part != prevPart+1 || ev.Seq > prev && ev.Part != 0 {
			t.Errorf("replay went from %d/%d to %d/%d", prev, prevPart, ev.Seq, ev.Part)
		}
		prev, prevPart = ev.Seq, ev.Part
		if ev.Chunk != nil {
			out = append(out, *ev.Chunk)
		}
	}
	return out
}

// checkChunks says whether got is c1 … cn, each once, in order.
func checkChunks(t *testing.T, what string, got []events.Chunk, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%s: %d chunks, want %d", what, len(got), n)
	}
	for i, c := range got {
		if c.Seq != int64(i+1) || string(c.Data) != fmt.Sprintf(`"c%d"`, i+1) || len(c.More) != 0 {
			t.Fatalf("%s: chunk %d is seq %d data %s (+%d more): a gap, a duplicate or out of order", what, i, c.Seq, c.Data, len(c.More))
		}
	}
}

// Chunks emitted within the window are stored as fewer events, each with
// its range; a live follower and a replay of the history both see every
// chunk once, in order, in the single-chunk shape.
func TestCoalescedChunksReplayOneByOne(t *testing.T) {
	t.Parallel()
	const n = 2000
	b, _ := setup(t, worker.Config{ChunkWindow: 20 * time.Millisecond}, map[string]worker.Handler{"stream": streamer(n)})

	var wg sync.WaitGroup
	var live []events.Chunk
	wg.Go(func() { live = replayChunks(t, b, "s1") }) // follows from before the first event
	publish(t, b.js, "jetrun.dispatch.stream", `{"runId":"s1","input":{}}`)
	row := jetruntest.WaitRow(t, b.store, "s1", time.Minute, jetruntest.Final)
	wg.Wait()
	if row.Status != events.StatusCompleted || row.Chunks != n {
		t.Fatalf("row: %s, %d chunks (%s)", row.Status, row.Chunks, row.Error)
	}
	checkChunks(t, "live", live, n)
	checkChunks(t, "history", replayChunks(t, b, "s1"), n)

	evs := waitForStatus(t, b.js, "s1", events.StatusCompleted)
	stored, coalesced := 0, 0
	for _, ev := range evs {
		if ev.Chunk == nil {
			continue
		}
		stored++
		if ev.Chunk.LastSeq() > ev.Chunk.Seq {
			coalesced++
			if want := wire.ChunkRangeMsgID("s1", ev.Chunk.Seq, ev.Chunk.Last); ev.Header.Get("Nats-Msg-Id") != want {
				t.Errorf("coalesced event %d-%d has Nats-Msg-Id %q, want %q", ev.Chunk.Seq, ev.Chunk.Last, ev.Header.Get("Nats-Msg-Id"), want)
			}
		}
	}
	if coalesced == 0 || stored >= n {
		t.Fatalf("%d chunks stored as %d events, %d of them coalesced", n, stored, coalesced)
	}
	t.Logf("%d chunks stored as %d events", n, stored)
	// The milestone after the last chunk is stored after it.
	if last := evs[len(evs)-1]; last.Status == nil {
		t.Fatalf("last event %s", last.Kind)
	}
	if m := evs[len(evs)-2]; m.Milestone == nil || evs[len(evs)-3].Chunk == nil || evs[len(evs)-3].Chunk.LastSeq() != n {
		t.Fatalf("the milestone did not follow the last chunk: %s, %s", m.Kind, evs[len(evs)-3].Kind)
	}
}

// A negative window (JETRUN_CHUNK_WINDOW=0) stores one event per chunk,
// in the single-chunk shape, as before coalescing.
func TestNoChunkWindowStoresOneEventPerChunk(t *testing.T) {
	t.Parallel()
	const n = 300
	b, _ := setup(t, worker.Config{ChunkWindow: -1}, map[string]worker.Handler{"stream": streamer(n)})
	publish(t, b.js, "jetrun.dispatch.stream", `{"runId":"s0","input":{}}`)
	jetruntest.WaitRow(t, b.store, "s0", time.Minute, jetruntest.Final)
	evs := waitForStatus(t, b.js, "s0", events.StatusCompleted)
	var stored []events.Chunk
	for _, ev := range evs {
		if ev.Chunk != nil {
			stored = append(stored, *ev.Chunk)
			if id := ev.Header.Get("Nats-Msg-Id"); id != wire.ChunkMsgID("s0", ev.Chunk.Seq) || ev.Chunk.Last != 0 {
				t.Fatalf("chunk %d: Nats-Msg-Id %q, last %d", ev.Chunk.Seq, id, ev.Chunk.Last)
			}
		}
	}
	checkChunks(t, "stored", stored, n)
	checkChunks(t, "replayed", replayChunks(t, b, "s0"), n)
}

// A quiet run's chunk leaves at once, whatever the window: the handler
// below waits, after its first chunk, until a live reader saw that chunk,
// which under a window of an hour it could only do if the chunk did not
// wait for its window. The burst after it, emitted within the window of
// the first, is merged into one event, published when the run ends.
func TestQuietChunkLeavesAtOnceAndABurstIsMerged(t *testing.T) {
	t.Parallel()
	seen := make(chan struct{})
	b, _ := setup(t, worker.Config{ChunkWindow: time.Hour}, map[string]worker.Handler{
		"quiet": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if err := run.Chunk(ctx, "c1"); err != nil {
				return worker.Result{}, err
			}
			select {
			case <-seen: // stored and delivered while the run waits, without a flush
			case <-ctx.Done():
				return worker.Result{}, context.Cause(ctx)
			}
			for i := 2; i <= 4; i++ {
				if err := run.Chunk(ctx, fmt.Sprintf("c%d", i)); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{Summary: "done"}, nil
		}),
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var live []events.Chunk
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range wire.Replay(ctx, b.js, wire.Namespace(events.Namespace("")), "q1", events.ReplayOptions{}) {
			if err != nil {
				t.Errorf("replay q1: %v", err)
				return
			}
			if ev.Chunk != nil {
				if live = append(live, *ev.Chunk); len(live) == 1 {
					close(seen)
				}
			}
		}
	}()
	publish(t, b.js, "jetrun.dispatch.quiet", `{"runId":"q1","input":{}}`)
	<-done // the run ended, or the minute ran out
	if len(live) == 0 {
		t.Fatal("the run's first chunk was not delivered while it waited: it waited for its window")
	}
	checkChunks(t, "live", live, 4)

	var stored []string
	for _, ev := range waitForStatus(t, b.js, "q1", events.StatusCompleted) {
		if c := ev.Chunk; c != nil {
			stored = append(stored, fmt.Sprintf("%d-%d %s", c.Seq, c.LastSeq(), ev.Header.Get("Nats-Msg-Id")))
		}
	}
	want := []string{"1-1 " + wire.ChunkMsgID("q1", 1), "2-4 " + wire.ChunkRangeMsgID("q1", 2, 4)}
	if fmt.Sprint(stored) != fmt.Sprint(want) {
		t.Fatalf("chunk events stored %q, want %q", stored, want)
	}
}

// A worker whose lease outlasts the events streams' dedup window says so
// when it is made: it re-sends an event after a fault for as long as its
// lease holds, and the stream would store a copy that had landed before the
// window twice. At the default lease it says nothing.
func TestWorkerWarnsWhenItsLeaseOutlastsTheEventsDedupWindow(t *testing.T) {
	t.Parallel()
	nc, _ := natstest.Connect(t, natstest.RunServer(t))
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{}) // the events dedup window at its default, 30 s
	for _, tc := range []struct {
		lease time.Duration
		warns bool
	}{{worker.DefaultLease, false}, {45 * time.Second, true}} {
		var logs lockedBuffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if _, err := worker.New(rt, worker.Config{Lease: tc.lease, Logger: logger}); err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(logs.String(), "JETRUN_EVENTS_DEDUP_WINDOW") &&
			strings.Contains(logs.String(), "dedup_window=30s") && strings.Contains(logs.String(), "lease="+tc.lease.String())
		if got != tc.warns {
			t.Errorf("lease %s: warned %v, want %v; logs: %q", tc.lease, got, tc.warns, logs.String())
		}
	}
}
