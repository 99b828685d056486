package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
)

// Erase removes every trace of a run: its queued dispatch, its events and
// signals (subject purges), its row, its index entries and the concurrency
// slots it held as a parent. A tombstone (24 h, kv.Store.Tombstone)
// records the dispatch stream's position at the erase, so a copy of the old
// dispatch still around cannot bring the run back, while a new dispatch of
// the same id (published later) starts it afresh. Callers erase only runs
// that are no longer live.
func (rt *Runtime) Erase(ctx context.Context, r *model.Row) error {
	ns := rt.cfg.Namespace
	info, err := rt.dispatch.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetrun: erase run %s: look up dispatch stream: %w", r.ID, err)
	}
	if err := rt.store.Index().Tombstone(ctx, r.ID, info.State.LastSeq); err != nil {
		return err
	}
	if r.DispatchSeq > 0 {
		if err := rt.dispatch.DeleteMsg(ctx, r.DispatchSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) &&
			!errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			return fmt.Errorf("jetrun: erase dispatch of run %s: %w", r.ID, err)
		}
	}
	for _, p := range []struct {
		stream  jetstream.Stream
		subject string
	}{
		{rt.EventsStreamFor(r.ID), ns.RunWildcard(r.ID)},
		{rt.signals, ns.RunSignalsWildcard(r.ID)},
	} {
		if err := p.stream.Purge(ctx, jetstream.WithPurgeSubject(p.subject)); err != nil {
			return fmt.Errorf("jetrun: erase run %s: purge %s: %w", r.ID, p.subject, err)
		}
	}
	return rt.store.Erase(ctx, r)
}
