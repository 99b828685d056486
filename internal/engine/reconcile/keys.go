package reconcile

import (
	"context"

	"github.com/jetrun/jetrun/internal/engine/keys"
	"github.com/jetrun/jetrun/internal/engine/model"
)

// advanceKey repairs the concurrency key of a queued run: a key whose
// holder ended without handing it on (its worker died between its final
// write and the hand-off), or whose hand-off stopped half way, moves on to
// its next queued run, and a queued run whose submitter died before it
// entered the key's queue is entered now (keys.Repair). A key held
// by a live run is left alone: its worker hands it on, or the run is taken
// over. Each key is advanced once per sweep, however many runs wait on it.
func (s *sweep) advanceKey(ctx context.Context, row *model.Row) error {
	if row.ConcurrencyKey == "" {
		return nil
	}
	s.mu.Lock()
	if s.keys == nil {
		s.keys = make(map[string]bool)
	}
	done := s.keys[row.ConcurrencyKey]
	s.keys[row.ConcurrencyKey] = true
	s.mu.Unlock()
	if done {
		return s.r.store.Keys().EnsureQueued(ctx, row)
	}
	return keys.Repair(ctx, s.r.rt, row)
}
