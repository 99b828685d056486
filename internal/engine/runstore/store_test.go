package runstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T, js jetstream.JetStream, replicas int) *runstore.Store {
	t.Helper()
	s, err := runstore.Open(context.Background(), js, runstore.Config{Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newRun(id string) *model.Row {
	return &model.Row{ID: id, AgentType: "demo", Status: events.StatusStarting, CreatedAt: time.Now()}
}

func TestCreateGetUpdate(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	testCAS(t, s)
}

// Replicated buckets report a lost compare-and-set with another error code
// (10164); the store must still say ErrConflict.
func TestCreateGetUpdateOnAThreeNodeCluster(t *testing.T) {
	t.Parallel()
	servers := natstest.RunCluster(t)
	_, js := natstest.Connect(t, servers[1])
	s := openStore(t, js, 3)
	natstest.WaitForStreamLeaders(t, js, "KV_jetrun_runs", "KV_jetrun_active")
	testCAS(t, s)
}

func testCAS(t *testing.T, s *runstore.Store) {
	t.Helper()
	ctx := context.Background()
	rev, err := s.Create(ctx, newRun("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, newRun("r1")); !errors.Is(err, runstore.ErrRunExists) {
		t.Fatalf("second create: %v", err)
	}
	row, got, err := s.Get(ctx, "r1")
	if err != nil || got != rev || row.Status != events.StatusStarting {
		t.Fatalf("get: %+v %d %v", row, got, err)
	}
	row.Status = events.StatusRunning
	if _, err := s.Update(ctx, row, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, row, rev); !errors.Is(err, runstore.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	if _, _, err := s.Get(ctx, "missing"); !errors.Is(err, runstore.ErrRunNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, _, err := s.Get(ctx, "a.b"); !errors.Is(err, events.ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
	bad := newRun("ok")
	bad.ID = "a.b"
	if _, err := s.Update(ctx, bad, 1); !errors.Is(err, events.ErrInvalidID) {
		t.Fatalf("update of a bad id: %v", err)
	}
	// A cleared row leaves a marker; a new row of the same id replaces it.
	if err := s.Delete(ctx, row); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Lookup(ctx, "r1"); !errors.Is(err, runstore.ErrRunNotFound) {
		t.Fatalf("lookup of a cleared row: %v, want ErrRunNotFound", err)
	}
	again := newRun("r1")
	again.Summary = "second life"
	if _, err := s.Create(ctx, again); err != nil {
		t.Fatalf("create over a cleared row: %v", err)
	}
	if row, _, err := s.Get(ctx, "r1"); err != nil || row.Summary != "second life" {
		t.Fatalf("row created over a cleared one: %+v %v", row, err)
	}
}

func TestMutateLosesNoUpdateUnderContention(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	if _, err := s.Create(ctx, newRun("hot")); err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				tag := fmt.Sprintf("w%d-%d", w, i)
				_, _, err := s.Mutate(ctx, "hot", func(r *model.Row) error {
					if r.Delivered == nil {
						r.Delivered = map[events.Status]time.Time{}
					}
					r.Delivered[events.Status(tag)] = time.Now() // idempotent: keyed by tag
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	row, _, err := s.Get(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if len(row.Delivered) != writers*each {
		t.Fatalf("%d updates survived, want %d", len(row.Delivered), writers*each)
	}
}

func TestMutateNoChangeAndErrors(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	rev, _ := s.Create(ctx, newRun("m"))
	row, got, err := s.Mutate(ctx, "m", func(*model.Row) error { return runstore.ErrNoChange })
	if err != nil || got != rev || row.ID != "m" {
		t.Fatalf("no change: %v %d", err, got)
	}
	boom := errors.New("boom")
	if _, _, err := s.Mutate(ctx, "m", func(*model.Row) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("fn error: %v", err)
	}
	if _, _, err := s.Mutate(ctx, "none", func(*model.Row) error { return nil }); !errors.Is(err, runstore.ErrRunNotFound) {
		t.Fatalf("missing: %v", err)
	}
	// A row someone wrote by hand (nats kv put) that is not JSON.
	bucket, _ := js.KeyValue(ctx, "jetrun_runs")
	if _, err := bucket.Put(ctx, "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "junk"); !errors.Is(err, runstore.ErrCorruptRow) {
		t.Fatalf("corrupt: %v", err)
	}
}

// MutateFrom writes from the row the caller holds, and re-reads when that
// row turns out stale: no update is lost either way.
func TestMutateFromStartsWithTheKnownRowAndRecoversFromAStaleOne(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	rev, err := s.Create(ctx, newRun("mf"))
	if err != nil {
		t.Fatal(err)
	}
	known, _, _ := s.Get(ctx, "mf")
	setSummary := func(v string) func(*model.Row) error {
		return func(r *model.Row) error { r.Summary += v; return nil }
	}
	row, rev2, err := s.MutateFrom(ctx, "mf", known, rev, setSummary("a"))
	if err != nil || row.Summary != "a" || rev2 <= rev {
		t.Fatalf("fresh known row: %+v %d %v", row, rev2, err)
	}
	// known is stale now: the write conflicts and goes through a re-read.
	row, _, err = s.MutateFrom(ctx, "mf", known, rev, setSummary("b"))
	if err != nil || row.Summary != "ab" {
		t.Fatalf("stale known row: %+v %v", row, err)
	}
	// A verdict against a stale row is checked against the stored one.
	row, _, err = s.MutateFrom(ctx, "mf", known, rev, func(r *model.Row) error {
		if r.Summary == "" {
			return errors.New("stale")
		}
		r.Summary += "c"
		return nil
	})
	if err != nil || row.Summary != "abc" {
		t.Fatalf("rejected stale row: %+v %v", row, err)
	}
	if got, _, _ := s.Get(ctx, "mf"); got.Summary != "abc" {
		t.Fatalf("stored %q", got.Summary)
	}
}

// A final status is never left: Mutate and MutateFrom refuse, in one
// place, a write that would move a final row to another status, whatever
// its function does; a write that leaves the status alone (a ledger mark)
// goes through, and the repair of a rewritten row has its own door.
func TestMutateNeverLeavesAFinalStatus(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	run := newRun("f")
	run.Detached = &events.Detached{OnFinish: "h"}
	if _, err := s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	done := model.Ended{Status: events.StatusCompleted}
	final, rev, err := s.Mutate(ctx, "f", model.Mutation(time.Now(), done))
	if err != nil || final.Status != events.StatusCompleted {
		t.Fatalf("end: %v %v", final, err)
	}
	revive := func(r *model.Row) error { r.Status = events.StatusRunning; return nil }
	if _, _, err := s.Mutate(ctx, "f", revive); !errors.Is(err, runstore.ErrFinal) {
		t.Fatalf("Mutate out of a final status: %v", err)
	}
	if _, _, err := s.MutateFrom(ctx, "f", final, rev, revive); !errors.Is(err, runstore.ErrFinal) {
		t.Fatalf("MutateFrom out of a final status: %v", err)
	}
	if got, _, _ := s.Get(ctx, "f"); got.Status != events.StatusCompleted {
		t.Fatalf("stored %s", got.Status)
	}
	marked, _, err := s.Mutate(ctx, "f", model.Mutation(time.Now(), model.FinishSeqRecorded{Status: events.StatusCompleted, Seq: 9}))
	if err != nil || marked.Finishes[events.StatusCompleted].Seq != 9 {
		t.Fatalf("a ledger mark on a final row: %v", err)
	}
	repair := model.FinalRepaired{Event: events.StatusEvent{RunID: "f", Status: events.StatusError, Reason: "r", At: time.Now()}}
	if _, _, err := s.Mutate(ctx, "f", model.Mutation(time.Now(), repair)); !errors.Is(err, runstore.ErrFinal) {
		t.Fatalf("a repair through Mutate: %v", err)
	}
	if got, _, err := s.RewriteFinal(ctx, "f", model.Mutation(time.Now(), repair)); err != nil || got.Status != events.StatusError {
		t.Fatalf("RewriteFinal: %v %v", got, err)
	}
}

func TestWatchSeesChangesAndDeletion(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rev, _ := s.Create(ctx, newRun("w"))
	w, err := s.Watch(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func() runstore.Snapshot {
		select {
		case snap := <-w.Updates():
			return snap
		case <-ctx.Done():
			t.Fatal("no update")
			return runstore.Snapshot{}
		}
	}
	if snap := next(); snap.Revision != rev || snap.Run.Status != events.StatusStarting {
		t.Fatalf("first = %+v", snap)
	}
	if _, _, err := s.Mutate(ctx, "w", func(r *model.Row) error { r.Status = events.StatusRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	if snap := next(); snap.Run == nil || snap.Run.Status != events.StatusRunning {
		t.Fatalf("second = %+v", snap)
	}
	if err := s.Delete(ctx, newRun("w")); err != nil {
		t.Fatal(err)
	}
	if snap := next(); !snap.Deleted {
		t.Fatalf("third = %+v", snap)
	}
	w.Stop() // idempotent with the deferred Stop
}

func TestList(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	for i := range 5 {
		r := newRun(fmt.Sprintf("l%d", i))
		if i%2 == 0 {
			r.Status = events.StatusCompleted
		}
		if _, err := s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.List(ctx, func(r *model.Row) bool { return r.Status == events.StatusCompleted })
	if err != nil || len(rows) != 3 {
		t.Fatalf("list = %d rows, %v", len(rows), err)
	}
	empty := openStore(t, js, 1)
	if _, err := empty.List(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// A watch whose connection goes away, and whose context then ends, stops
// cleanly (it used to crash the process in this spot).
func TestWatchStopsCleanlyAfterItsConnectionCloses(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	s := openStore(t, js, 1)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := s.Create(ctx, newRun("gone")); err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	// A second watch on the same connection shows when the break reaches
	// watchers: its updates channel closes with the connection.
	probe, err := s.WatchRows(ctx, runstore.RowWatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-w.Updates()
	nc.Close() // the server-side watch breaks; re-watching fails
	for range probe.Changes() {
	}
	cancel()
	w.Stop()
}

// A settled give-up's entries are purged by someone who read it settled
// just as a retry resumes it and re-enters it in the index: the purge must
// not leave the resumed run out of the index.
func TestUnindexOfAGiveUpResumedMeanwhileKeepsItIndexed(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	if _, err := s.Create(ctx, newRun("g1")); err != nil {
		t.Fatal(err)
	}
	settled, _, err := s.Mutate(ctx, "g1", model.Mutation(time.Now(), model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over budget"}))
	if err != nil || !settled.Settled() {
		t.Fatalf("give-up: %+v %v", settled, err)
	}
	// The resume (engine.Runtime.Resume): entries, row, entries.
	if err := s.Index().Reindex(ctx, settled); err != nil {
		t.Fatal(err)
	}
	resumed, _, err := s.Mutate(ctx, "g1", model.Mutation(time.Now(), model.Resumed{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Index().Reindex(ctx, resumed); err != nil {
		t.Fatal(err)
	}
	// The late purge of whoever read the row settled.
	if err := s.Index().Unindex(ctx, settled); err != nil {
		t.Fatal(err)
	}
	active, err := s.Index().Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 1 || active[0].ID != "g1" {
		t.Fatalf("active %+v; want the resumed run", active)
	}
}

// A worker's liveness key that lapses (its TTL ran out, the bucket leaves
// no marker because it refuses roll-ups) makes the followed workers say
// its runs' holder is gone; a key released at once does the same.
func TestWorkersSeeALapsedKeyWithoutAMarker(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	ws, err := s.Workers().Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Stop()
	lapsing, err := s.Workers().Acquire(ctx, "w-lapse", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	released, err := s.Workers().Acquire(ctx, "w-release", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	held := func(worker, epoch string) *model.Row {
		return &model.Row{ID: "r", Worker: worker, WorkerEpoch: epoch}
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		return ws.Alive(held("w-lapse", lapsing.Epoch())) && ws.Alive(held("w-release", released.Epoch()))
	}, "the workers' keys were not seen")
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		return !ws.Alive(held("w-lapse", lapsing.Epoch())) && !ws.Alive(held("w-release", released.Epoch()))
	}, "a lapsed or released worker still counts as alive")
	// The server removes an expired key on its own timer, which may run a
	// little after the watcher's count of the TTL: read it until it goes.
	natstest.Eventually(t, 10*time.Second, func() bool {
		alive, err := s.Workers().Alive(ctx, "w-lapse", lapsing.Epoch())
		if err != nil {
			t.Fatalf("Alive of a lapsed key: %v", err)
		}
		return !alive
	}, "Alive still finds the lapsed key")
}
