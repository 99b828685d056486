package reconcile

import (
	"context"

	"github.com/jetrun/jetrun/pkg/kv"
)

// advanceKey repairs the concurrency key of a queued run: a key whose
// holder ended without handing it on (its worker died between its final
// write and the hand-off), or whose hand-off stopped half way, moves on to
// its next queued run, and a queued run whose submitter died before it
// entered the key's queue is entered now (kv.Store.RepairKey). A key held by a live run is
// left alone: its worker hands it on, or the run is taken over.
func (s *sweep) advanceKey(ctx context.Context, row *kv.Run) error {
	return s.r.store.RepairKey(ctx, s.r.cfg.Namespace, row)
}
