package wire_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestEnsureStreamsCreatesThenNeverClobbers(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx := context.Background()
	var ns events.Namespace

	// An operator created the events stream first, tuned, and without the
	// jetrun subject.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "JETRUN_EVENTS", Subjects: []string{"ops.audit"}, MaxAge: time.Hour, Description: "tuned by ops",
	}); err != nil {
		t.Fatal(err)
	}
	opts := events.StreamOptions{EventsMaxAge: 48 * time.Hour, DedupWindow: time.Minute, EventsDedupWindow: 20 * time.Second}
	for range 2 { // idempotent
		if err := wire.EnsureStreams(ctx, js, wire.Namespace(ns), opts); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := js.Stream(ctx, "JETRUN_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	cfg := ev.CachedInfo().Config
	if cfg.MaxAge != time.Hour || cfg.Description != "tuned by ops" || !slices.Equal(cfg.Subjects, []string{"ops.audit", "jetrun.run.>"}) {
		t.Fatalf("events stream was rewritten: max age %s, %q, subjects %v", cfg.MaxAge, cfg.Description, cfg.Subjects)
	}
	disp, err := js.Stream(ctx, "JETRUN_DISPATCH")
	if err != nil {
		t.Fatal(err)
	}
	if c := disp.CachedInfo().Config; c.Retention != jetstream.WorkQueuePolicy || c.Duplicates != time.Minute {
		t.Fatalf("dispatch stream: %+v", c)
	}
	if _, err := js.Stream(ctx, "JETRUN_DLQ"); err != nil {
		t.Fatal(err)
	}
	// The operator's events stream kept its window; a fresh namespace gets
	// the option's.
	if err := wire.EnsureStreams(ctx, js, "fresh", opts); err != nil {
		t.Fatal(err)
	}
	fresh, err := js.Stream(ctx, "FRESH_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if d := fresh.CachedInfo().Config.Duplicates; d != 20*time.Second {
		t.Fatalf("a new events stream has dedup window %s, want the option's 20s", d)
	}
}

func TestEnsureStreamsRefusesWrongRetention(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JETRUN_DISPATCH", Subjects: []string{"jetrun.dispatch.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{}); err == nil {
		t.Fatal("a limits-retention dispatch stream was accepted")
	}
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{Replicas: 9}); err == nil {
		t.Fatal("9 replicas accepted")
	}
}

// A malformed message last on a run's subjects does not stall a history
// replay.
func TestHistoryReplaySkipsAMalformedLastEvent(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ subject, data string }{
		{"jetrun.run.m1.chunk", `{"runId":"m1","seq":1,"data":"x"}`},
		{"jetrun.run.m1.milestone", `oops`},
	} {
		if _, err := js.Publish(ctx, m.subject, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, err := range wire.Replay(ctx, js, "", "m1", events.ReplayOptions{Follow: events.HistoryOnly}) {
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d events, want the one well-formed chunk", n)
	}
}
