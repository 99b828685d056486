package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/worker"
)

// An operator deletes the events stream and the runs bucket under a running
// worker: the worker re-creates them, and a new run completes — neither
// ending "error" nor counted as a lost worker.
func TestDeletedStreamAndBucketAreRecreated(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, nil)
	ctx := context.Background()
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"before","input":{"steps":2,"stepMs":10}}`)
	jetruntest.WaitRow(t, b.store, "before", 10*time.Second, jetruntest.Final)

	if err := b.js.DeleteStream(ctx, "JETRUN_EVENTS"); err != nil {
		t.Fatal(err)
	}
	if err := b.js.DeleteKeyValue(ctx, "jetrun_runs"); err != nil {
		t.Fatal(err)
	}
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"after","input":{"steps":2,"stepMs":10}}`)
	row := jetruntest.WaitRow(t, b.store, "after", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt-row.Handoffs != 1 {
		t.Fatalf("run after the delete: %+v", row)
	}
	evs := jetruntest.ReadEvents(t, b.js, "after")
	if got := jetruntest.Statuses(evs); len(got) == 0 || got[len(got)-1] != events.StatusCompleted {
		t.Fatalf("statuses after the delete: %v", got)
	}
}

// The server goes away in the middle of a run and comes back on the same
// port and store a few seconds later, within the lease: the handler never
// sees the fault (Chunk and Milestone return nil), the run completes on its
// first attempt, and every chunk is stored exactly once: one event per
// chunk with coalescing off, or, with a window longer than the run, the
// first chunk on its own (the run was quiet) and the two coalesced events
// the milestone and the run's end close ([2, 99] before the milestone,
// sent and re-sent through the outage, and [100, 200]).
func TestRunOutlivesServerRestart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		window time.Duration
		events [][2]int64 // the chunk ranges stored, nil for one per chunk
	}{
		{"window off", -1, nil},
		{"one window", time.Hour, [][2]int64{{1, 1}, {2, 99}, {100, 200}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			evs := streamThroughRestart(t, c.window)
			if c.events == nil {
				return
			}
			var got [][2]int64
			for _, ev := range evs {
				if ev.Chunk != nil {
					got = append(got, [2]int64{ev.Chunk.Seq, ev.Chunk.LastSeq()})
				}
			}
			if !slices.Equal(got, c.events) {
				t.Fatalf("chunk events stored %v, want %v", got, c.events)
			}
		})
	}
}

// A chunk emitted while an event of its run is unacknowledged is not
// sent at once, even by a run that emitted no chunk before: it opens a
// batch, and the chunk after it joins. The server is down while the
// handler publishes a progress report and then two chunks, so the report
// cannot be acknowledged in between; the chunks are stored as one event.
func TestChunkBehindAnUnacknowledgedEventJoinsABatch(t *testing.T) {
	t.Parallel()
	outage := natstest.RunOutage(t)
	nc := outage.Conn
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	started, down, emitted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var handlerErrs []error
	// Claimed as it starts (no claim window): the outage comes after.
	startWorker(t, nc, worker.Config{ChunkWindow: time.Hour, ClaimWindow: -1}, map[string]worker.Handler{
		"behind": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			close(started)
			<-down
			if err := run.Progress(ctx, worker.Progress{Fraction: 0.5, Message: "during the outage"}); err != nil {
				handlerErrs = append(handlerErrs, err)
			}
			for _, c := range []string{"c1", "c2"} {
				if err := run.Chunk(ctx, c); err != nil {
					handlerErrs = append(handlerErrs, err)
				}
			}
			close(emitted)
			return worker.Result{Summary: "done"}, nil
		}),
	})
	publish(t, js, "jetrun.dispatch.behind", `{"runId":"b1","input":{}}`)
	<-started
	outage.Stop()
	natstest.Eventually(t, 60*time.Second, func() bool { return outage.FailedReconnects() >= 1 },
		"the connection did not notice the server was gone")
	close(down)
	<-emitted // both chunks emitted while nothing could be acknowledged
	outage.Start()

	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "b1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || len(handlerErrs) > 0 {
		t.Fatalf("run: status %s (%s), handler errors %v", row.Status, row.Error, handlerErrs)
	}
	var got [][2]int64
	for _, ev := range jetruntest.ReadEvents(t, js, "b1") {
		if ev.Chunk != nil {
			got = append(got, [2]int64{ev.Chunk.Seq, ev.Chunk.LastSeq()})
		}
	}
	if want := [][2]int64{{1, 2}}; !slices.Equal(got, want) {
		t.Fatalf("chunk events stored %v, want %v", got, want)
	}
}

// streamThroughRestart runs 200 chunks and a milestone through a server
// restart with chunk window window, checks every chunk is stored once, and
// returns the run's events.
func streamThroughRestart(t *testing.T, window time.Duration) []jetruntest.Event {
	outage := natstest.RunOutage(t)
	nc := outage.Conn
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const chunks = 200
	halfway, resume := make(chan struct{}), make(chan struct{})
	var handlerErrs []error
	startWorker(t, nc, worker.Config{ChunkWindow: window}, map[string]worker.Handler{
		"restart": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for i := 1; i <= chunks; i++ {
				if i == chunks/2 {
					close(halfway)
					<-resume
					if _, err := run.Milestone(ctx, "during the outage", nil); err != nil {
						handlerErrs = append(handlerErrs, err)
					}
				}
				if err := run.Chunk(ctx, i); err != nil {
					handlerErrs = append(handlerErrs, err)
				}
			}
			return worker.Result{Summary: "done"}, nil
		}),
	})
	publish(t, js, "jetrun.dispatch.restart", `{"runId":"r1","input":{}}`)
	<-halfway
	outage.Stop()
	close(resume) // the handler goes on publishing while the server is away
	// Down until the worker's connection has tried to reach it 10 times.
	natstest.Eventually(t, 60*time.Second, func() bool { return outage.FailedReconnects() >= 10 },
		"the connection did not try to reconnect")
	outage.Start()

	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "r1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 1 {
		t.Fatalf("run after the restart: status %s, reason %q, attempt %d: %s", row.Status, row.Reason, row.Attempt, row.Error)
	}
	if len(handlerErrs) > 0 {
		t.Fatalf("the handler saw %d errors, first %v", len(handlerErrs), handlerErrs[0])
	}
	seen := map[int]int{}
	evs := jetruntest.ReadEvents(t, js, "r1")
	for _, c := range jetruntest.Chunks(evs) {
		seen[int(c.Seq)]++
	}
	for i := 1; i <= chunks; i++ {
		if seen[i] != 1 {
			t.Fatalf("chunk %d stored %d times", i, seen[i])
		}
	}
	return evs
}

// An operator deletes the dispatch stream (and so the worker's consumers)
// under a running worker: its fetch loops re-create stream and consumers,
// and a dispatch published then completes.
func TestDeletedDispatchStreamAndConsumersAreRecreated(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, nil)
	ctx := context.Background()
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"before","input":{"steps":1,"stepMs":0}}`)
	jetruntest.WaitRow(t, b.store, "before", 10*time.Second, jetruntest.Final)
	if err := b.js.DeleteStream(ctx, "JETRUN_DISPATCH"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		_, err := b.js.Consumer(ctx, "JETRUN_DISPATCH", "agent-demo")
		return err == nil
	}, "the worker did not re-create its consumer")
	publish(t, b.js, "jetrun.dispatch.demo", `{"runId":"after","input":{"steps":1,"stepMs":0}}`)
	row := jetruntest.WaitRow(t, b.store, "after", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 1 {
		t.Fatalf("run after the delete: %+v", row)
	}
}

// JetStream is away for longer than the lease: the worker's liveness lapses
// and it stops its attempt, but its process lives on. Once the server is
// back the worker resumes its epoch and hands the run off as a blink, not a
// lost worker: with MaxAttempts 1 the run still completes, on attempt 2,
// with attempt 1 recorded as a blink.
func TestALivenessLapseIsNotALostWorker(t *testing.T) {
	t.Parallel()
	started := make(chan int, 4)
	causes := make(chan error, 4)
	outage, js, logs := outageWorker(t,
		map[string]worker.Handler{
			"blink": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
				started <- run.Attempt()
				if run.Attempt() == 1 {
					<-ctx.Done() // stopped by the lapse
					causes <- context.Cause(ctx)
					return worker.Result{}, context.Cause(ctx)
				}
				return worker.Result{Summary: "done"}, nil
			}),
		})
	publish(t, js, "jetrun.dispatch.blink", `{"runId":"b1","input":{}}`)
	if a := <-started; a != 1 {
		t.Fatalf("first attempt %d", a)
	}
	outage.Stop()
	// Down until the worker saw its liveness lapse and stopped the attempt,
	// then one more lease, so the key has expired when the server is back.
	natstest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(logs.String(), "worker liveness lost") },
		"the worker's liveness did not lapse")
	if err := <-causes; !errors.Is(err, worker.ErrLeaseLost) {
		t.Fatalf("attempt 1 stopped with %v, want ErrLeaseLost", err)
	}
	// The key's TTL runs out on the clock while no server is up to show
	// it: one lease after the lapse it has expired.
	time.Sleep(time.Second)
	outage.Start()

	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "b1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || !slices.Equal(row.Blinks, []int{1}) || row.Handoffs != 1 {
		t.Fatalf("after the lapse: status %s (%s: %s), attempt %d, blinks %v, handoffs %d",
			row.Status, row.Reason, row.Error, row.Attempt, row.Blinks, row.Handoffs)
	}
	if !strings.Contains(logs.String(), "worker liveness back") {
		t.Fatalf("no line says the liveness is back:\n%s", logs.String())
	}
}

// Right after an outage that made its own renewals fail, a worker gives a
// holder whose liveness key is missing about a lease to resume before it
// takes the run over (see docs/leases.md). A holder that never comes back
// is still taken over (here: MaxAttempts 1, so the run ends max-attempts)
// within a few leases of the outage's end. (The grace itself is not
// isolated here: after an outage the fetch loop's backoff delays the
// dispatch about as much.)
func TestADeadHolderIsTakenOverAfterAnOutage(t *testing.T) {
	t.Parallel()
	outage := natstest.RunOutage(t)
	nc := outage.Conn
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	const lease = 2 * time.Second
	startWorker(t, nc, worker.Config{Lease: lease, MaxAttempts: 1, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		map[string]worker.Handler{"ghostly": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "ran"}, nil
		})})
	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The holder: a worker process whose key will be missing.
	ghost, err := store.Workers().Acquire(context.Background(), "ghost", lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Create(context.Background(), &model.Row{ID: "g1", AgentType: "ghostly", Status: events.StatusRunning,
		Attempt: 1, Worker: "ghost", WorkerEpoch: ghost.Epoch(), CreatedAt: time.Now(), Unindexed: true}); err != nil {
		t.Fatal(err)
	}
	outage.Stop()
	natstest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(logs.String(), "renew worker liveness; retrying") },
		"the worker's renewal did not fail")
	outage.Start()
	natstest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(logs.String(), "renewed again") || strings.Contains(logs.String(), "liveness back")
	},
		"the worker's liveness did not come back")
	back := time.Now()
	if err := ghost.Release(context.Background()); err != nil { // gone, as if it never resumed
		t.Fatal(err)
	}
	publish(t, js, "jetrun.dispatch.ghostly", `{"runId":"g1","input":{}}`)
	row := jetruntest.WaitRow(t, store, "g1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusError || row.Reason != events.ReasonMaxAttempts {
		t.Fatalf("run of a holder that never came back: %s/%s", row.Status, row.Reason)
	}
	if d := time.Since(back); d > 4*lease {
		t.Fatalf("taken over %s after the outage, want a few leases at most", d)
	}
}

// A first attempt's handler starts while its "running" event is on its
// way, but the run is never made final without it: the events stream
// refuses every new message while the handler runs and returns, so the
// run is released, not completed; once the stream takes messages again the
// run runs again and its timeline begins with "running".
func TestRunIsNotFinalWithoutItsRunningEvent(t *testing.T) {
	t.Parallel()
	calls := make(chan int, 16)
	// Claimed at its start (no claim window): a run that ends within the
	// window has no "running" event at all (lazy_test.go).
	b, _ := setup(t, worker.Config{ClaimWindow: -1}, map[string]worker.Handler{
		"quick": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			calls <- run.Attempt()
			return worker.Result{Summary: "done"}, nil
		}),
	})
	ctx := context.Background()
	stream, err := b.js.Stream(ctx, "JETRUN_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	// One message so the stream can be capped at what it holds.
	publish(t, b.js, "jetrun.run.filler.status", `{}`)
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := info.Config
	refusing := open
	refusing.MaxMsgs, refusing.Discard = int64(info.State.Msgs), jetstream.DiscardNew
	if _, err := b.js.UpdateStream(ctx, refusing); err != nil {
		t.Fatal(err)
	}

	publish(t, b.js, "jetrun.dispatch.quick", `{"runId":"q1","input":{}}`)
	select {
	case attempt := <-calls:
		if attempt != 1 {
			t.Fatalf("first call of the handler: attempt %d, want 1", attempt)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start while its running event was on its way")
	}
	row := jetruntest.WaitRow(t, b.store, "q1", 30*time.Second, func(r *model.Row) bool { return r.Handoffs >= 1 })
	if row.Status.Final() {
		t.Fatalf("run made final while its running event could not be stored: %+v", row)
	}
	if evs := jetruntest.ReadEvents(t, b.js, "q1"); len(evs) != 0 {
		t.Fatalf("events stored while the stream refused them: %d", len(evs))
	}

	if _, err := b.js.UpdateStream(ctx, open); err != nil {
		t.Fatal(err)
	}
	row = jetruntest.WaitRow(t, b.store, "q1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("after the stream took messages again: %+v", row)
	}
	got := jetruntest.Statuses(jetruntest.ReadEvents(t, b.js, "q1"))
	if len(got) != 2 || got[0] != events.StatusRunning || got[1] != events.StatusCompleted {
		t.Fatalf("statuses %v, want [running completed]", got)
	}
}

// One run's events stream going away stalls that run's publishing, never
// the worker's heartbeat: the run's emit and its publisher wait out the
// fault holding their locks, and the heartbeat, which tends every run's
// publisher and syncs its row, waits for neither. Another run of the
// worker keeps its attempt through three leases, its handler never
// cancelled.
func TestStalledPublisherDoesNotStallTheHeart(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	streaming, waiting := make(chan struct{}), make(chan struct{})
	cancelled := make(chan error, 1)
	// Both runs claimed as they start (no claim window): the chatty one's
	// "running" is stored before its stream goes away.
	b, _ := setup(t, worker.Config{Lease: lease, ClaimWindow: -1}, map[string]worker.Handler{
		"chatty": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			close(streaming)
			tokens := time.NewTicker(time.Millisecond) // a model's pace
			defer tokens.Stop()
			for ctx.Err() == nil {
				// Progress leaves the row due for a sync while the
				// publisher waits: the heart's sync must not wait too.
				if err := run.Progress(ctx, worker.Progress{Fraction: 0.5}); err != nil {
					return worker.Result{}, err
				}
				if err := run.Chunk(ctx, "token"); err != nil {
					return worker.Result{}, err
				}
				select {
				case <-tokens.C:
				case <-ctx.Done():
				}
			}
			return worker.Result{}, ctx.Err()
		}),
		"quiet": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			close(waiting)
			<-ctx.Done()
			select {
			case cancelled <- context.Cause(ctx):
			default:
			}
			return worker.Result{}, ctx.Err()
		}),
	})
	publish(t, b.js, "jetrun.dispatch.quiet", `{"runId":"q","input":{}}`)
	<-waiting
	jetruntest.WaitRow(t, b.store, "q", 10*time.Second, func(r *model.Row) bool { return r.FirstEventSeq != 0 })
	publish(t, b.js, "jetrun.dispatch.chatty", `{"runId":"c","input":{}}`)
	<-streaming
	if err := b.js.DeleteStream(context.Background(), "JETRUN_EVENTS"); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-cancelled:
		t.Fatalf("the quiet run's handler was cancelled while another run's publisher stalled: %v", cause)
	case <-time.After(3 * lease):
	}
	row, _, err := b.store.Get(context.Background(), "q")
	if err != nil || row.Status != events.StatusRunning || row.Attempt != 1 {
		t.Fatalf("the quiet run after three leases: %+v, %v", row, err)
	}
	jetruntest.OpenRuntime(t, b.nc, jetrun.Config{}) // the stream back, so both runs can end
}

// The worker's liveness lapses while one of its runs waits for an event's
// acknowledgement (the server went away mid-publish): the lapse stops that
// attempt without waiting for the publish, so the handler's call returns
// ErrLeaseLost, not the publish's ack timeout (5 s, longer than the lease).
// Once the server is back the run is handed off and completes on attempt
// 2, and no event of attempt 1 is stored after attempt 2's running.
func TestALapseStopsARunWaitingForAnAcknowledgement(t *testing.T) {
	t.Parallel()
	streaming := make(chan struct{})
	stopped := make(chan error, 1)
	outage, js, logs := outageWorker(t,
		map[string]worker.Handler{
			"milestones": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
				if run.Attempt() > 1 {
					return worker.Result{Summary: "done"}, nil
				}
				for i := 0; ; i++ {
					// Each milestone is stored before Milestone returns.
					if _, err := run.Milestone(ctx, fmt.Sprintf("m%d", i), nil); err != nil {
						stopped <- err
						return worker.Result{}, err
					}
					if i == 0 {
						close(streaming)
					}
				}
			}),
		})
	publish(t, js, "jetrun.dispatch.milestones", `{"runId":"w1","input":{}}`)
	<-streaming
	outage.Stop()
	select {
	case err := <-stopped:
		if !errors.Is(err, worker.ErrLeaseLost) || errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Fatalf("the waiting Milestone returned %v; want ErrLeaseLost from the lapse, not the ack timeout", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiting Milestone never returned while the server was down")
	}
	if !strings.Contains(logs.String(), "worker liveness lost") {
		t.Fatalf("the attempt stopped but no line says the liveness lapsed:\n%s", logs.String())
	}
	outage.Start()

	store, err := runstore.Open(context.Background(), js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, store, "w1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || !slices.Equal(row.Blinks, []int{1}) {
		t.Fatalf("after the lapse: status %s (%s: %s), attempt %d, blinks %v",
			row.Status, row.Reason, row.Error, row.Attempt, row.Blinks)
	}
	evs := waitForStatus(t, js, "w1", events.StatusCompleted)
	second := -1
	for i, ev := range evs {
		if ev.Status != nil && ev.Status.Status == events.StatusRunning && ev.Attempt == "2" {
			second = i
		}
		if second >= 0 && ev.Attempt == "1" {
			t.Fatalf("event %d (%s) of attempt 1 stored after attempt 2's running", ev.Seq, ev.Kind)
		}
	}
	if second < 0 {
		t.Fatalf("no running event of attempt 2 among %d events", len(evs))
	}
}

// outageWorker starts a server the test can take down and bring back, and
// on it a worker serving handlers with a one-second lease, MaxAttempts 1,
// and its log in logs.
func outageWorker(t *testing.T, handlers map[string]worker.Handler) (*natstest.Outage, jetstream.JetStream, *lockedBuffer) {
	t.Helper()
	outage := natstest.RunOutage(t)
	js, err := jetstream.New(outage.Conn)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	startWorker(t, outage.Conn, worker.Config{Lease: time.Second, MaxAttempts: 1, Logger: slog.New(slog.NewTextHandler(logs, nil))}, handlers)
	return outage, js, logs
}

// A report in a tree with a budget is charged while the server's answers
// are held back for longer than a write may wait: the charge's
// compare-and-set lands, its answer is lost, and the handler's Usage does
// not fail for it. The worker sends the charge again once answers flow
// (the worker holds its runs through the fault: its lease is longer), and
// the charge counts once: the run completes, and its usage, its own tree
// totals (a run with a budget charges its own row) or its root's (a nested
// run charges the top of its tree) count each report once.
func TestBudgetChargeOutlivesALostAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, dispatch, charged string
	}{
		{"own row", `{"runId":"top","input":{},"budget":{"tokens":1000000}}`, "top"},
		{"root's row", `{"runId":"kid","parent":"p1","root":"p1","budgetFrom":["p1"],"input":{}}`, "p1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := natstest.RunServer(t)
			link := natstest.RunLink(t, ns)
			wnc, err := nats.Connect(link.URL(), nats.MaxReconnects(-1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(wnc.Close)
			_, js := natstest.Connect(t, ns) // the test's own view, past the link
			logs := &lockedBuffer{}
			ready, fault := make(chan struct{}), make(chan struct{})
			reported := make(chan error, 1)
			startWorker(t, wnc, worker.Config{Lease: time.Minute, Logger: slog.New(slog.NewTextHandler(logs, nil))},
				map[string]worker.Handler{"spender": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
					if err := run.Usage(ctx, worker.Usage{InputTokens: 10}); err != nil {
						return worker.Result{}, err
					}
					close(ready)
					<-fault
					err := run.Usage(ctx, worker.Usage{InputTokens: 100, OutputTokens: 20, CostMicros: 7})
					reported <- err
					return worker.Result{Summary: "spent"}, err
				})})
			store, err := runstore.Open(context.Background(), js, runstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if c.charged == "p1" {
				if _, err := store.Create(context.Background(), &model.Row{ID: "p1", AgentType: "elsewhere",
					Status: events.StatusRunning, Budget: &events.TreeBudget{Tokens: 1_000_000}, CreatedAt: time.Now(), Unindexed: true}); err != nil {
					t.Fatal(err)
				}
			}
			var run struct {
				RunID string `json:"runId"`
			}
			if err := json.Unmarshal([]byte(c.dispatch), &run); err != nil {
				t.Fatal(err)
			}
			publish(t, js, "jetrun.dispatch.spender", c.dispatch)
			<-ready
			link.HoldAfter([]byte("PUB $KV.jetrun_runs." + c.charged + " ")) // a write of the charged row
			close(fault)
			want := jetruntype.UsageTotals{InputTokens: 110, OutputTokens: 20, CostMicros: 7}
			// The charge lands on the server...
			jetruntest.WaitRow(t, store, c.charged, 30*time.Second, func(r *model.Row) bool {
				return r.TreeUsage != nil && *r.TreeUsage == want
			})
			// ... and its answer is lost: the worker's try ends (and it
			// tries again), or the report fails.
			natstest.Eventually(t, 60*time.Second, func() bool {
				return len(reported) > 0 || strings.Contains(logs.String(), "charge usage to a run's tree; retrying")
			}, "the charge's try did not end while the answers were held")
			link.Release()

			row := jetruntest.WaitRow(t, store, run.RunID, 60*time.Second, jetruntest.Final)
			if err := <-reported; err != nil || row.Status != events.StatusCompleted {
				t.Fatalf("the report through the fault: %v; the run %s (%s: %s)", err, row.Status, row.Reason, row.Error)
			}
			charged, _, err := store.Get(context.Background(), c.charged)
			if err != nil {
				t.Fatal(err)
			}
			if got := *charged.TreeUsage; got != want {
				t.Fatalf("tree usage of %s: %+v, want each report once: %+v", c.charged, got, want)
			}
			if got := row.Usage.UsageTotals; got != want {
				t.Fatalf("usage of %s: %+v, want %+v", run.RunID, got, want)
			}
		})
	}
}
