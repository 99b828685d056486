package worker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

// A streaming run holds only the events still on their way: each event it
// publishes drops those acknowledged before it. Before, a run that never
// waited for its events held its whole window (256 events, each with its
// message and headers) until the window filled: a fleet of 1,000 streaming
// runs kept about 60 MB of stored events alive for the GC to scan, and its
// p99 from Run.Chunk to a reader doubled (make bench, token streams).
func TestStreamingRunHoldsOnlyUnacknowledgedEvents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(rt, Config{ChunkWindow: -1}) // one event per chunk
	if err != nil {
		t.Fatal(err)
	}
	const streamed = 300 // more than publishWindow
	subject := wire.Namespace(events.Namespace("")).RunSubject("s1", events.KindChunk)
	held := make(chan int, 1)
	w.Handle("stream", HandlerFunc(func(ctx context.Context, run *Run) (Result, error) {
		for i := 1; i <= streamed; i++ {
			if err := run.Chunk(ctx, i); err != nil {
				return Result{}, err
			}
		}
		stream, err := js.Stream(ctx, wire.Namespace(events.Namespace("")).EventsStream())
		if err != nil {
			return Result{}, err
		}
		natstest.Eventually(t, 30*time.Second, func() bool {
			info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
			return err == nil && info.State.Subjects[subject] == streamed
		}, "the run's %d chunks were not stored", streamed)
		// Stored is not yet acknowledged to this process (the answers may
		// still be on their way under load): publish one more chunk at a
		// time, each dropping what was acknowledged by then, until the
		// answers are in, for at most a while. (The test must not read the
		// answers itself: a future's answer is read once, by the publisher.)
		p := run.b.(*execution).pub
		n := 0
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i, deadline := streamed+1, time.Now().Add(30*time.Second); ; i++ {
			if err := run.Chunk(ctx, i); err != nil {
				return Result{}, err
			}
			p.mu.Lock()
			n = len(p.inflight)
			p.mu.Unlock()
			if n <= 1 || time.Now().After(deadline) {
				break
			}
			select { // poll
			case <-tick.C:
			case <-ctx.Done():
				return Result{}, ctx.Err()
			}
		}
		held <- n
		return Result{}, nil
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if _, err := js.Publish(ctx, "jetrun.dispatch.stream", []byte(`{"runId":"s1","input":{}}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-held:
		if n > 1 {
			t.Fatalf("after its %d chunks were stored, one more at a time for 30 s, the run holds %d events; want at most the last one", streamed, n)
		}
	case <-ctx.Done():
		t.Fatal("the run did not stream")
	}
}
