package kv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
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
	r := &jetruntype.Run{ID: "lc1", AgentType: "demo", Status: events.StatusStarting, CreatedAt: time.Now(), Unindexed: true}
	rev, err := s.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got, grev, err := s.confirmMissing(ctx, "lc1")
	if err != nil || got.ID != "lc1" || grev != rev {
		t.Fatalf("leader read of an existing row: %+v rev %d (want %d) %v", got, grev, rev, err)
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
}
