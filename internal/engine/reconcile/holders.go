package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jetrun/jetrun/internal/engine/holding"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// A second line of defence for a run held by a live worker that no longer
// executes it (its row `running`, the holder alive, nothing happening): the
// worker's own leftovers (pkg/worker, leftovers.go) release such rows, but
// if that release is lost too, nobody takes a run over from a live worker.
// Each sweep notes the running runs whose rows name a live worker; at most
// every HolderCheckEvery each such worker is asked, in one request on its
// own subject, which of them it does not execute (internal/holding), and
// those are released: the holder is cleared and the attempt counted as a
// hand-off, so the run's dispatch (or, when it is gone, the next sweep's
// re-dispatch) starts it again. One question per worker, not per run, and
// nothing on a run's path. A worker too old to answer, or too busy, is
// left alone until the next time.

// holderQuestionTimeout bounds one question to a worker.
const holderQuestionTimeout = 2 * time.Second

// noteHeld records row, which a live worker holds (model.AskHolder), for
// the question to its holder.
func (s *sweep) noteHeld(row *model.Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(map[string][]*model.Row)
	}
	s.held[row.Worker] = append(s.held[row.Worker], row)
}

// askHolders asks each live worker noted by the sweep, at most every
// HolderCheckEvery, which of its runs it does not execute, and releases
// those.
func (s *sweep) askHolders(ctx context.Context) {
	r := s.r
	for _, worker := range slices.Sorted(maps.Keys(s.held)) {
		if ctx.Err() != nil {
			return
		}
		if !r.paceOK("holder/"+worker, s.now, r.cfg.HolderCheckEvery) {
			continue
		}
		rows := s.held[worker]
		ids := make([]string, 0, len(rows))
		for _, row := range rows {
			ids = append(ids, row.ID)
		}
		qctx, cancel := context.WithTimeout(ctx, holderQuestionTimeout)
		idle, err := holding.Ask(qctx, r.js.Conn(), r.ns.WorkerSubject(worker), ids)
		cancel()
		if err != nil {
			r.logs.Log(ctx, r.log, slog.LevelDebug, "ask holder", "ask a worker which runs it executes; asking again later",
				"worker", worker, "err", err)
			continue
		}
		for _, id := range idle {
			i := slices.IndexFunc(rows, func(row *model.Row) bool { return row.ID == id })
			if i < 0 {
				continue
			}
			if err := s.releaseIdle(ctx, rows[i]); err != nil {
				r.fault(ctx, "release a run its live holder does not execute", err, "run_id", id)
			}
		}
	}
}

// releaseIdle clears the holder of row, a run its live worker says it does
// not execute, unless the row moved on since it was read.
func (s *sweep) releaseIdle(ctx context.Context, row *model.Row) error {
	released := false
	now := time.Now()
	by := model.Holder{Worker: row.Worker, Epoch: row.WorkerEpoch, Attempt: row.Attempt}
	_, _, err := s.r.store.Mutate(ctx, row.ID, func(run *model.Row) error {
		released = false
		if run.Status != events.StatusRunning {
			return runstore.ErrNoChange
		}
		// A hand-off, not a lost worker: its process lives on. Unless the
		// row moved on since it was read.
		if err := model.Apply(run, model.HandedBack{By: by}, now); errors.Is(err, model.ErrNotHolder) {
			return runstore.ErrNoChange
		} else if err != nil {
			return err
		}
		released = true
		return nil
	})
	if err != nil || !released {
		return err
	}
	s.count(func(st *Stats) { st.Released++ })
	obs.Report(ctx, s.r.log, obs.RunRecovered, row.ID, "action", "released",
		"why", "its live holder does not execute it", "worker", row.Worker, "attempt", row.Attempt)
	return nil
}
