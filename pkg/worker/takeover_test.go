package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A worker shutting down hands its run back at once: the other worker takes
// it over (attempt 2) long before the lease would have expired, and resumes
// after the last milestone.
func TestShutdownHandsRunsBackToAnotherWorker(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	// A lease far longer than the test's patience: only a hand-back can
	// move the run in time.
	cfg := worker.Config{Lease: 5 * time.Minute, Concurrency: 1}
	a := startWorker(t, nc, cfg, nil)
	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}

	publish(t, js, "jetrun.dispatch.demo", `{"runId":"hb","input":{"steps":30,"stepMs":100}}`)
	jetruntest.WaitRow(t, store, "hb", 20*time.Second, func(r *model.Row) bool { return r.Milestones >= 3 })

	nc2, _ := natstest.Connect(t, ns)
	startWorker(t, nc2, cfg, nil) // serves until cleanup
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	row := jetruntest.WaitRow(t, store, "hb", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || row.Handoffs != 1 {
		t.Fatalf("row: status %s attempt %d handoffs %d error %q", row.Status, row.Attempt, row.Handoffs, row.Error)
	}
	var out demo.Output
	if err := json.Unmarshal(row.Output, &out); err != nil {
		t.Fatal(err)
	}
	if out.StepsRunHere >= 30 || out.StepsRunHere < 1 {
		t.Fatalf("second attempt ran %d of 30 steps; want it to resume after the milestones", out.StepsRunHere)
	}
	evs := waitForStatus(t, js, "hb", events.StatusCompleted)
	if got := fmt.Sprint(jetruntest.Statuses(evs)); got != "[running running completed]" {
		t.Fatalf("statuses = %s", got)
	}
	seqs := jetruntest.MilestoneSeqs(evs)
	want := make([]int, 30)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(seqs, want) {
		t.Fatalf("milestone sequences = %v", seqs)
	}
	chunks := jetruntest.ChunkSeqs(evs)
	for i, s := range chunks {
		if s != int64(i+1) {
			t.Fatalf("chunk seqs = %v, want 1..n", chunks)
		}
	}
}

// Once another attempt owns the run, the old one can write neither events
// nor the row, and its handler context is cancelled with ErrLeaseLost.
func TestLostLeaseFencesTheOldAttempt(t *testing.T) {
	t.Parallel()
	started, proceed := make(chan struct{}), make(chan struct{})
	results := make(chan error, 2)
	b, w := setup(t, worker.Config{}, map[string]worker.Handler{
		"zombie": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			// Stored before the takeover (a chunk waits up to the chunk
			// window for company otherwise).
			if err := cmp.Or(run.Chunk(ctx, "before"), run.Flush(ctx)); err != nil {
				return worker.Result{}, err
			}
			close(started)
			<-proceed
			// Chunks are pipelined: the refusal shows on the chunk's call
			// or, at the latest, on Flush.
			results <- cmp.Or(run.Chunk(context.Background(), "after"), run.Flush(context.Background()))
			<-ctx.Done()
			results <- context.Cause(ctx)
			return worker.Result{Summary: "zombie result"}, nil
		}),
	})
	publish(t, b.js, "jetrun.dispatch.zombie", `{"runId":"z","input":{}}`)
	<-started

	// Another worker takes the run over: the claim, then its first event.
	ctx := context.Background()
	thief, _, err := b.store.Mutate(ctx, "z", func(r *model.Row) error {
		r.Attempt++
		r.Worker = "thief"
		r.LeaseUntil = time.Now().Add(time.Hour)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(events.StatusEvent{RunID: "z", Status: events.StatusRunning, Attempt: thief.Attempt})
	if _, err := b.js.Publish(ctx, "jetrun.run.z.status", data); err != nil {
		t.Fatal(err)
	}
	// The new holder's chunk 2 carries the very message id the zombie's
	// next chunk will: the zombie must not take it for its own lost ack.
	chunk := &nats.Msg{Subject: "jetrun.run.z.chunk", Data: []byte(`{"runId":"z","seq":2,"data":"thief"}`), Header: nats.Header{}}
	chunk.Header.Set(jetstream.MsgIDHeader, wire.ChunkMsgID("z", 2))
	chunk.Header.Set(events.HeaderAttempt, fmt.Sprint(thief.Attempt))
	if _, err := b.js.PublishMsg(ctx, chunk); err != nil {
		t.Fatal(err)
	}
	close(proceed)

	if err := <-results; !errors.Is(err, worker.ErrLeaseLost) {
		t.Fatalf("chunk after takeover: %v, want ErrLeaseLost", err)
	}
	if err := <-results; !errors.Is(err, worker.ErrLeaseLost) {
		t.Fatalf("handler context cause: %v, want ErrLeaseLost", err)
	}
	// The zombie's result is never written.
	natstest.Eventually(t, 5*time.Second, func() bool {
		row, _, err := b.store.Get(ctx, "z")
		return err == nil && row.Worker == "thief" && row.Status == events.StatusRunning
	}, "row changed")
	evs := jetruntest.ReadEvents(t, b.js, "z")
	if got := jetruntest.ChunkSeqs(evs); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("chunks = %v, want the zombie's first and the new holder's", got)
	}
	if last := evs[len(evs)-1]; last.Attempt != fmt.Sprint(thief.Attempt) {
		t.Fatalf("the zombie wrote after the takeover: %+v", last)
	}
	// Stop waits for the zombie's handler to return and its attempt to end.
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	row, _, _ := b.store.Get(ctx, "z")
	if row.Status != events.StatusRunning || row.Summary != "" {
		t.Fatalf("zombie wrote its outcome: %+v", row)
	}
}

// A handler that ignores its cancellation cannot pin the run: after a lease
// its worker stops renewing, and the run ends aborted.
func TestAStuckHandlerDoesNotPinACancelledRun(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	stuck := worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		<-release // ignores ctx
		return worker.Result{}, nil
	})
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	cfg := worker.Config{Lease: time.Second}
	startWorker(t, nc, cfg, map[string]worker.Handler{"stuck": stuck})
	nc2, _ := natstest.Connect(t, ns)
	startWorker(t, nc2, cfg, map[string]worker.Handler{"stuck": stuck})
	t.Cleanup(func() { close(release) }) // before the workers stop (cleanups run last-in first)
	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, js, "jetrun.dispatch.stuck", `{"runId":"pinned","input":{}}`)
	jetruntest.WaitRow(t, store, "pinned", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	if _, _, err := store.Mutate(context.Background(), "pinned", func(r *model.Row) error {
		r.CancelRequested, r.CancelReason = true, "stop"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := wire.PublishCancel(context.Background(), js, "", "pinned", "stop"); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "pinned", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusAborted {
		t.Fatalf("row: %+v", row)
	}
}

// A Wait that gives up does not leave the run marked as waiting.
func TestAWaitThatTimesOutClearsWaitingFor(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{RowSyncInterval: 50 * time.Millisecond}, map[string]worker.Handler{
		"impatient": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			if _, err := run.Wait(wctx, "approve"); err == nil {
				return worker.Result{}, errors.New("got a signal nobody sent")
			}
			if err := run.Progress(ctx, worker.Progress{Fraction: 0.5, Message: "moving on"}); err != nil {
				return worker.Result{}, err
			}
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		}),
	})
	publish(t, b.js, "jetrun.dispatch.impatient", `{"runId":"imp","input":{}}`)
	jetruntest.WaitRow(t, b.store, "imp", 10*time.Second, func(r *model.Row) bool {
		return r.Progress != nil && r.Progress.Message == "moving on" && r.WaitingFor == ""
	})
}

// A run taken over from a worker that died while its handler waited for a
// signal does not go on showing that wait: the new attempt waits only if
// its handler does, so the no-progress budget and Await see it as it is.
func TestATakeoverDoesNotInheritTheLostAttemptsWait(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"silent": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			close(second)
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		}),
	})
	ctx := context.Background()
	// The row as a worker that died mid-Wait left it: running, held by a
	// worker with no liveness key, waiting for a signal.
	dead := &model.Row{ID: "t1", AgentType: "silent", Input: json.RawMessage(`{}`), Status: events.StatusRunning,
		Attempt: 1, Worker: "dead-worker", WorkerEpoch: "gone", WaitingFor: "approve",
		CreatedAt: time.Now(), StartedAt: time.Now()}
	if _, err := b.store.Create(ctx, dead); err != nil {
		t.Fatal(err)
	}
	publish(t, b.js, "jetrun.dispatch.silent", `{"runId":"t1","input":{}}`)
	<-second
	row := jetruntest.WaitRow(t, b.store, "t1", 10*time.Second, func(r *model.Row) bool { return r.Attempt == 2 })
	if row.Status != events.StatusRunning || row.WaitingFor != "" {
		t.Fatalf("taken over: status %s, waitingFor %q; want running and waiting for nothing", row.Status, row.WaitingFor)
	}
}
