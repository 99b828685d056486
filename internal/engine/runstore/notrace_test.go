package runstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A lookup tells a key that never held a row (ErrNoTrace) from one whose
// row was removed (its marker): only the first proves a young dispatch's
// run was not cleared since.
func TestALookupTellsANeverWrittenRowFromARemovedOne(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	if _, _, err := s.Lookup(ctx, "never"); !errors.Is(err, runstore.ErrRunNotFound) || !errors.Is(err, runstore.ErrNoTrace) {
		t.Fatalf("lookup of a key never written: %v, want ErrRunNotFound and ErrNoTrace", err)
	}
	r := newRun("removed")
	if _, err := s.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Lookup(ctx, "removed"); !errors.Is(err, runstore.ErrRunNotFound) || errors.Is(err, runstore.ErrNoTrace) {
		t.Fatalf("lookup of a removed row: %v, want ErrRunNotFound without ErrNoTrace", err)
	}
	if !s.MissProvesUncleared(time.Now()) {
		t.Error("a dispatch stored now: a miss with no trace does not prove it uncleared")
	}
	// Past half the marker's life, an erase's marker may be gone.
	if s.MissProvesUncleared(time.Now().Add(-time.Minute)) || s.MissProvesUncleared(time.Time{}) {
		t.Error("a dispatch a minute old (or of unknown age): a miss proves it uncleared")
	}
}
