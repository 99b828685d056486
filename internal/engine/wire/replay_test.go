package wire_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// replayAll collects a replay's events and its error, if any.
func replayAll(ctx context.Context, js jetstream.JetStream, runID string, opts events.ReplayOptions) ([]events.Event, error) {
	var evs []events.Event
	for ev, err := range wire.Replay(ctx, js, "", runID, opts) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func kindsOf(evs []events.Event) []string {
	var ks []string
	for _, ev := range evs {
		ks = append(ks, ev.Kind)
	}
	return ks
}

// Replay's stop rules: history only stops at the last event stored when it
// began (and returns at once when there is none); until-end follows the live
// stream to the final status; a kinds filter still ends there; a resume
// after the end yields nothing; a forever replay ends with its context.
func TestReplayFollowModes(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	publish := func(subject, data string, h nats.Header) {
		t.Helper()
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(data), Header: h}); err != nil {
			t.Fatal(err)
		}
	}

	if evs, err := replayAll(ctx, js, "nobody", events.ReplayOptions{Follow: events.HistoryOnly}); err != nil || len(evs) != 0 {
		t.Fatalf("history of an unknown run: %v, %v", evs, err)
	}

	publish("jetrun.run.f1.chunk", `{"runId":"f1","seq":1,"data":"a"}`, nats.Header{events.HeaderAttempt: {"2"}})
	publish("jetrun.run.f2.chunk", `{"runId":"f2","seq":1,"data":"other run"}`, nil)
	publish("jetrun.run.f1.status", `{"runId":"f1","status":"running","at":"2026-01-01T00:00:00Z"}`, nil)

	history, err := replayAll(ctx, js, "f1", events.ReplayOptions{Follow: events.HistoryOnly})
	if err != nil || !slices.Equal(kindsOf(history), []string{"chunk", "status"}) {
		t.Fatalf("history: %v, %v", kindsOf(history), err)
	}
	if c := history[0]; c.Attempt != 2 || c.Chunk == nil || c.Chunk.RunID != "f1" || c.RunID != "f1" || c.Pending != 1 || c.Seq != 1 {
		t.Fatalf("first event %+v", c)
	}
	if s := history[1]; s.Status == nil || s.Status.Status != events.StatusRunning || s.Attempt != 0 || s.Pending != 0 || s.Seq != 3 {
		t.Fatalf("second event %+v", s)
	}

	type result struct {
		evs []events.Event
		err error
	}
	all, chunks := make(chan result, 1), make(chan result, 1)
	go func() {
		evs, err := replayAll(ctx, js, "f1", events.ReplayOptions{})
		all <- result{evs, err}
	}()
	go func() {
		evs, err := replayAll(ctx, js, "f1", events.ReplayOptions{Kinds: []string{events.KindChunk}})
		chunks <- result{evs, err}
	}()
	// Whether the replays are still in the history or already live when
	// these land, they must give the same events.
	publish("jetrun.run.f1.progress", `{}`, nil)
	publish("jetrun.run.f1.chunk", `{"runId":"f1","seq":2,"data":"b"}`, nil)
	publish("jetrun.run.f1.status", `{"runId":"f1","status":"completed","at":"2026-01-01T00:00:01Z"}`, nil)
	publish("jetrun.run.f1.chunk", `{"runId":"f1","seq":3,"data":"after the end"}`, nil)

	r := <-all
	if r.err != nil || !slices.Equal(kindsOf(r.evs), []string{"chunk", "status", "progress", "chunk", "status"}) {
		t.Fatalf("until end: %v, %v", kindsOf(r.evs), r.err)
	}
	for i, ev := range r.evs {
		if i > 0 && ev.Seq <= r.evs[i-1].Seq {
			t.Fatalf("until end out of order: %+v", r.evs)
		}
	}
	last := r.evs[len(r.evs)-1]
	if !last.Ends() {
		t.Fatalf("until end stopped at %+v", last)
	}
	r = <-chunks
	if r.err != nil || !slices.Equal(kindsOf(r.evs), []string{"chunk", "chunk"}) {
		t.Fatalf("chunks until end: %v, %v", kindsOf(r.evs), r.err)
	}

	if evs, err := replayAll(ctx, js, "f1", events.ReplayOptions{After: last.Seq}); err != nil || len(evs) != 0 {
		t.Fatalf("resumed after the end: %v, %v", kindsOf(evs), err)
	}
	resumed, err := replayAll(ctx, js, "f1", events.ReplayOptions{After: history[1].Seq, Follow: events.HistoryOnly})
	if err != nil || !slices.Equal(kindsOf(resumed), []string{"progress", "chunk", "status", "chunk"}) || resumed[0].Seq <= history[1].Seq {
		t.Fatalf("history resumed after %d: %v, %v", history[1].Seq, kindsOf(resumed), err)
	}

	fctx, fcancel := context.WithCancel(ctx)
	n := 0
	var stopErr error
	for ev, err := range wire.Replay(fctx, js, "", "f1", events.ReplayOptions{Follow: events.Forever}) {
		if err != nil {
			stopErr = err
			break
		}
		if n++; ev.Pending == 0 {
			fcancel()
		}
	}
	fcancel()
	if n != 6 || !errors.Is(stopErr, events.ErrReplayStopped) {
		t.Fatalf("forever: %d events, then %v", n, stopErr)
	}
}

// A replay deletes its consumer when it is done: more replays than a
// stream may hold consumers (1,000 by default) run one after another on a
// server with default limits, each succeeds, and none is left behind.
func TestReplaysLeaveNoConsumerBehind(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "jetrun.run.r1.status", []byte(`{"runId":"r1","status":"running","at":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	name, err := wire.RunEventsStream(ctx, js, "", "r1")
	if err != nil {
		t.Fatal(err)
	}
	const replays = 1200
	for i := range replays {
		evs, err := replayAll(ctx, js, "r1", events.ReplayOptions{Follow: events.HistoryOnly})
		if err != nil || len(evs) != 1 {
			t.Fatalf("replay %d of %d: %d events, %v", i+1, replays, len(evs), err)
		}
	}
	stream, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left on %s after %d replays", info.State.Consumers, name, replays)
	}
}
