package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The row an attempt writes: e.cur and e.rev are the newest row it knows
// (curMu), and every write is a compare-and-set fenced by owned. The fields
// a handler changes often (progress, signs of life, waits, signals seen)
// wait in the execution under stateMu until the next row write takes them
// (applyState): the heart's row sync (heart.go) or the final write
// (outcome.go).

// owned fences a row write: only the holding attempt of a live run may write.
func (e *execution) owned(r *jetruntype.Run) error {
	if !model.Of(r).HeldBy(e.w.cfg.ID, e.attempt) || r.Status.Final() {
		return ErrLeaseLost
	}
	return nil
}

// write applies fn to the newest known row and stores it with a
// compare-and-set, falling back to a re-read (runstore.Store.MutateFrom).
func (e *execution) write(ctx context.Context, fn func(*jetruntype.Run) error) (*jetruntype.Run, error) {
	e.curMu.Lock()
	defer e.curMu.Unlock()
	row, rev, err := e.w.store.MutateFrom(ctx, e.id, e.cur, e.rev, fn)
	if errors.Is(err, runstore.ErrRunNotFound) {
		return nil, ErrLeaseLost // cleared
	}
	if err != nil {
		return nil, err
	}
	e.cur, e.rev = row, rev
	return row, nil
}

// noteSignal records, for the next row sync, that the run showed signs of
// life, with an optional new progress snapshot.
func (e *execution) noteSignal(at time.Time, snap *jetruntype.ProgressSnapshot) {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	if at.After(e.lastSignalAt) {
		e.lastSignalAt = at
	}
	if snap != nil {
		e.snapshot = snap
	}
	e.dirty = true
}

func (e *execution) isDirty() bool {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	return e.dirty
}

// applyState copies the pending row fields onto r. It is cumulative, hence
// idempotent, as runstore.Store.Mutate requires.
func (e *execution) applyState(r *jetruntype.Run) {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	chunks, milestones, lastName := e.shownChunks, e.shownMilestone, e.shownMilestoneName
	if milestones >= r.Milestones && lastName != "" {
		r.LastMilestone = lastName
	}
	model.Of(r).SetWaiting(e.waitingFor, time.Now()) // a wait that ended restarts the no-progress clock
	for name, seq := range e.signalsSeen {
		if r.SignalsSeen == nil {
			r.SignalsSeen = make(map[string]uint64)
		}
		r.SignalsSeen[name] = max(r.SignalsSeen[name], seq)
	}
	if e.snapshot != nil {
		s := *e.snapshot
		r.Progress = &s
	}
	if e.lastSignalAt.After(r.LastSignalAt) {
		r.LastSignalAt = e.lastSignalAt
	}
	r.Chunks = max(r.Chunks, chunks)
	r.Milestones = max(r.Milestones, milestones)
	if r.FirstEventSeq == 0 {
		r.FirstEventSeq = e.firstEventSeq
	}
	e.dirty = e.applyUsage(r) // reports not charged yet keep the row due for a sync
}
