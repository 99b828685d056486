package worker

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The row an attempt writes: e.cur and e.rev are the newest row it knows
// (curMu), and every write is a compare-and-set of the attempt's events
// (apply), which the row refuses once the attempt no longer holds it. The
// fields a handler changes often (progress, signs of life, waits, signals
// seen) wait in the execution under stateMu until the next row write takes
// them (synced): the heart's row sync (heart.go) or the final write
// (outcome.go).

// holder is the attempt as the row names it: every event of the attempt
// carries it, and the row refuses one it no longer holds.
func (e *execution) holder() model.Holder {
	return model.Holder{Worker: e.w.cfg.ID, Attempt: e.attempt}
}

// apply applies evs, the attempt's events, to r at now (model.ApplyAll):
// the attempt's fence. A row the attempt no longer holds (taken over,
// released, ended) refuses them: ErrLeaseLost.
func (e *execution) apply(r *jetruntype.Run, now time.Time, evs ...model.Event) error {
	err := model.ApplyAll(model.Of(r), now, evs...)
	if errors.Is(err, model.ErrNotHolder) {
		return ErrLeaseLost
	}
	return err
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

// synced is the attempt's row sync (model.Synced): the pending row
// fields, cumulative, hence idempotent, as runstore.Store.Mutate requires.
// Taking them clears the attempt's dirty mark, unless it holds usage
// reports not charged yet (the row stays due for a sync).
func (e *execution) synced() model.Synced {
	chunks, milestone := e.emit.shown()
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	ev := model.Synced{
		By:            e.holder(),
		LastSignalAt:  e.lastSignalAt,
		Chunks:        chunks,
		Milestones:    milestone.Sequence,
		LastMilestone: milestone.Name,
		WaitingFor:    e.waitingFor, // a wait that ended restarts the no-progress clock
		SignalsSeen:   maps.Clone(e.signalsSeen),
		FirstEventSeq: e.firstEventSeq,
	}
	if e.snapshot != nil {
		s := *e.snapshot
		ev.Progress = &s
	}
	var behind bool
	ev.Usage, ev.StepUsage, ev.ChargeSteps, behind = e.syncedUsage()
	e.dirty = behind
	return ev
}
