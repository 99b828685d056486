package runstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// On a replicated bucket a row a direct get missed is looked up on the
// stream's leader: a row that exists comes back with its revision; a row
// that never existed, or was deleted, is ErrRunNotFound.
func TestLeaderConfirmsAMissOnAThreeNodeCluster(t *testing.T) {
	t.Parallel()
	servers := natstest.RunCluster(t)
	_, js := natstest.Connect(t, servers[2])
	ctx := context.Background()
	s, err := Open(ctx, js, Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitForStreamLeaders(t, js, "KV_jetrun_runs", "KV_jetrun_active")
	if s.replicas != 3 {
		t.Fatalf("store sees %d replicas, want 3", s.replicas)
	}
	r := &model.Row{ID: "lc1", AgentType: "demo", Status: events.StatusStarting, CreatedAt: time.Now(), Unindexed: true}
	rev, err := s.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got, grev, err := s.confirmMissing(ctx, "lc1")
	if err != nil || got.ID != "lc1" || grev != rev {
		t.Fatalf("leader read of an existing row: %+v rev %d (want %d) %v", got, grev, rev, err)
	}
	// A create refused as "exists" is confirmed on the leader: a row that
	// is there is ErrRunExists; none there (the refusal was for an earlier
	// create still in process, which may yet be lost) is a transient fault
	// to retry.
	if _, err := s.Create(ctx, r); !errors.Is(err, ErrRunExists) {
		t.Fatalf("second create: %v, want ErrRunExists", err)
	}
	if _, err := s.createOver(ctx, "never", []byte(`{}`)); !errors.Is(err, jsfault.ErrWriteInFlight) ||
		jsfault.Classify(ctx, err) != jsfault.Transient {
		t.Fatalf("create refused for a row the leader does not have: %v, want a transient ErrWriteInFlight", err)
	}
	if _, _, err := s.confirmMissing(ctx, "never"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("leader read of a missing row: %v", err)
	}
	if err := s.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.confirmMissing(ctx, "lc1"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("leader read of a deleted row: %v", err)
	}
	if _, _, err := s.Get(ctx, "lc1"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("get of a deleted row: %v", err)
	}
	// The marker a cleared row leaves behind does not block a new row.
	if _, err := s.Create(ctx, r); err != nil {
		t.Fatalf("create over a cleared row's marker: %v", err)
	}
}

// A stream without a leader (an election, quorum lost) answers a read on
// its leader with nothing at all: the read gives up after leaderReadTimeout
// even for a caller's context without a deadline, so an Await that rereads
// its row is never stuck in it.
func TestLeaderReadIsBoundedWhenNoLeaderAnswers(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// Someone listens (so no "no responders") but never answers.
	sub, err := nc.SubscribeSync("$JS.API.STREAM.MSG.GET.KV_silent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	begin := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := leaderLast(context.Background(), nc, "KV_silent", "$KV.silent.x")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a read nobody answered succeeded")
		}
		if d := time.Since(begin); d > leaderReadTimeout+2*time.Second {
			t.Fatalf("the read took %s", d)
		}
	case <-time.After(leaderReadTimeout + 5*time.Second):
		t.Fatal("the read on a silent leader did not give up")
	}
}

// On a replicated bucket a worker whose liveness key lapsed takes it back
// with the same epoch (Resume), reading the key from the leader; a key
// another incarnation holds is not taken back (ErrLivenessLost).
func TestResumeLivenessOnAThreeNodeCluster(t *testing.T) {
	t.Parallel()
	servers := natstest.RunCluster(t)
	_, js := natstest.Connect(t, servers[1])
	ctx := context.Background()
	s, err := Open(ctx, js, Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitForStreamLeaders(t, js, "KV_jetrun_runs", "KV_jetrun_active")
	l, err := s.Workers().Acquire(ctx, "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Still there: Resume goes on from it, and renewals work.
	if err := l.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	// Gone (as after its TTL): Resume writes it again, same epoch.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if alive, _ := s.Workers().Alive(ctx, "w1", l.Epoch()); alive {
		t.Fatal("released key still alive")
	}
	if err := l.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if alive, err := s.Workers().Alive(ctx, "w1", l.Epoch()); !alive || err != nil {
		t.Fatalf("after resume: alive %v, %v", alive, err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	// Another incarnation with the same id: this epoch is over.
	if _, err := s.Workers().Acquire(ctx, "w1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, ErrLivenessLost) {
		t.Fatalf("renew after another incarnation acquired: %v", err)
	}
	if err := l.Resume(ctx); !errors.Is(err, ErrLivenessLost) {
		t.Fatalf("resume after another incarnation acquired: %v", err)
	}
}
