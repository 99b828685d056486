package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open returns the engine of a fresh runtime (jetruntest.NewEnv) and its
// JetStream context.
func open(t *testing.T) (*engine.Runtime, jetstream.JetStream) {
	t.Helper()
	env := jetruntest.NewEnv(t)
	return engine.From(env.Runtime), env.JS
}

func TestOpenCreatesTheStreamsAndBuckets(t *testing.T) {
	t.Parallel()
	rt, js := open(t)
	ctx := context.Background()
	for _, name := range []string{"JETRUN_DISPATCH", "JETRUN_EVENTS", "JETRUN_SIGNALS", "JETRUN_FINISH", "JETRUN_DLQ", "KV_jetrun_runs", "KV_jetrun_active"} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s after Open: %v", name, err)
		}
	}
	if rt.Namespace() != "" || rt.Store() == nil || rt.DispatchStream() == nil || len(rt.EventsStreams()) != 1 {
		t.Fatalf("runtime not bound: namespace %q", rt.Namespace())
	}
}

func TestOpenRejectsABadConfigWithoutIO(t *testing.T) {
	t.Parallel()
	// A nil connection: a config error must come before any I/O.
	_, err := jetrun.Open(context.Background(), nil, jetrun.Config{Streams: events.StreamOptions{Replicas: 9}})
	if err == nil {
		t.Fatal("Open accepted 9 replicas")
	}
}

// A dispatch published twice under one id is stored once; with Requeue, a
// copy that is no longer queued (consumed) is published again under a new
// id, so a dispatch is waiting in the queue afterwards.
func TestPublishDispatchDedupAndRequeue(t *testing.T) {
	t.Parallel()
	rt, _ := open(t)
	ctx := context.Background()
	d := events.Dispatch{RunID: "r1", Input: json.RawMessage(`{}`)}
	first, err := rt.PublishDispatch(ctx, "demo", d, engine.DispatchOptions{})
	if err != nil || first.Duplicate {
		t.Fatalf("first publish: %+v, %v", first, err)
	}
	again, err := rt.PublishDispatch(ctx, "demo", d, engine.DispatchOptions{})
	if err != nil || !again.Duplicate || again.Seq != first.Seq {
		t.Fatalf("second publish: %+v, %v; want a duplicate of seq %d", again, err, first.Seq)
	}
	if q, err := rt.DispatchQueued(ctx, first.Seq); err != nil || !q {
		t.Fatalf("DispatchQueued(%d) = %v, %v; want true", first.Seq, q, err)
	}
	if err := rt.DispatchStream().DeleteMsg(ctx, first.Seq); err != nil { // as a consumed work-queue message
		t.Fatal(err)
	}
	if q, err := rt.DispatchQueued(ctx, first.Seq); err != nil || q {
		t.Fatalf("DispatchQueued after delete = %v, %v; want false", q, err)
	}
	dup, err := rt.PublishDispatch(ctx, "demo", d, engine.DispatchOptions{})
	if err != nil || !dup.Duplicate {
		t.Fatalf("publish without Requeue: %+v, %v; want the dedup window's answer", dup, err)
	}
	re, err := rt.PublishDispatch(ctx, "demo", d, engine.DispatchOptions{Requeue: true, Retry: 5 * time.Second})
	if err != nil || re.Duplicate || re.Seq == first.Seq {
		t.Fatalf("publish with Requeue: %+v, %v; want a new message", re, err)
	}
	if q, err := rt.DispatchQueued(ctx, re.Seq); err != nil || !q {
		t.Fatalf("requeued dispatch not queued: %v, %v", q, err)
	}
}

// Announce publishes the status event with the finish-owed header when the
// run owes a finish, once per status within the dedup window.
func TestAnnounceMarksAnOwedFinish(t *testing.T) {
	t.Parallel()
	rt, js := open(t)
	ctx := context.Background()
	d := events.Dispatch{RunID: "r2", Input: json.RawMessage(`{}`), Detached: &events.Detached{OnFinish: "h"}}
	row := model.NewRun("demo", d, 0, time.Now())
	if err := model.Apply(row, model.Ended{Status: events.StatusCompleted}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := rt.Announce(ctx, row, "w1"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, "JETRUN_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, "jetrun.run.r2.status")
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(events.HeaderFinishOwed); got != string(events.StatusCompleted) {
		t.Errorf("%s = %q, want completed", events.HeaderFinishOwed, got)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("jetrun.run.r2.status"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["jetrun.run.r2.status"]; n != 1 {
		t.Errorf("status events stored = %d, want 1 (deduplicated)", n)
	}
	ack, err := rt.PublishFinish(ctx, row, events.StatusCompleted)
	if err != nil || ack == nil {
		t.Fatalf("PublishFinish: %v, %v", ack, err)
	}
}

// Erase removes the run's row, events and queued dispatch.
func TestEraseRemovesEveryTrace(t *testing.T) {
	t.Parallel()
	rt, js := open(t)
	ctx := context.Background()
	d := events.Dispatch{RunID: "r3", Input: json.RawMessage(`{}`)}
	p, err := rt.PublishDispatch(ctx, "demo", d, engine.DispatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	row := model.NewRun("demo", d, p.Seq, time.Now())
	if err := model.Apply(row, model.Ended{Status: events.StatusAborted}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Store().Create(ctx, row); err != nil {
		t.Fatal(err)
	}
	if err := rt.Announce(ctx, row, ""); err != nil {
		t.Fatal(err)
	}
	if err := rt.Erase(ctx, row); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.Store().Get(ctx, "r3"); !errors.Is(err, runstore.ErrRunNotFound) {
		t.Errorf("row after Erase: %v, want not found", err)
	}
	if q, err := rt.DispatchQueued(ctx, p.Seq); err != nil || q {
		t.Errorf("dispatch after Erase queued = %v, %v", q, err)
	}
	s, _ := js.Stream(ctx, "JETRUN_EVENTS")
	if _, err := s.GetLastMsgForSubject(ctx, "jetrun.run.r3.>"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("events after Erase: %v, want none", err)
	}
	if cleared, err := rt.Store().Index().Cleared(ctx, "r3", p.Seq); err != nil || !cleared {
		t.Errorf("Cleared(old dispatch) = %v, %v; want true (tombstone)", cleared, err)
	}
}

// Repair re-creates a deleted stream, at most once per RepairEvery.
func TestRepairRecreatesADeletedStream(t *testing.T) {
	t.Parallel()
	rt, js := open(t)
	ctx := context.Background()
	if err := js.DeleteStream(ctx, "JETRUN_EVENTS"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Repair(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "JETRUN_EVENTS"); err != nil {
		t.Fatalf("JETRUN_EVENTS after Repair: %v", err)
	}
	if err := js.DeleteStream(ctx, "JETRUN_EVENTS"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Repair(ctx); err != nil { // within RepairEvery: skipped
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "JETRUN_EVENTS"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a second Repair within RepairEvery ran: %v", err)
	}
}
