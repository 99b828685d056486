package worker

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The row an attempt writes: the attempt's rowWriter knows the newest row,
// and every write is a compare-and-set of the attempt's events (apply),
// which the row refuses once the attempt no longer holds it. The fields a
// handler changes often (progress, signs of life, waits, signals seen)
// wait in the rowWriter until the next row write takes them (synced): the
// heart's row sync (heart.go) or the final write (outcome.go).

// rowWriter is the row of an attempt: the newest row it knows (cur, rev)
// and the fields awaiting the next row write. turn, a one-slot queue
// taken with the writer's context, lets one compare-and-set through at a
// time, so the attempt's writes never race each other into a conflict and
// a re-read; mu guards the fields and is never held across a write, so a
// handler noting progress never waits for one.
type rowWriter struct {
	store *runstore.Store
	id    string
	turn  chan struct{}

	mu       sync.Mutex
	pending  bool       // cur is a claim not written yet (lazy.go): every write is refused
	cur      *model.Row // read-only: a write replaces it
	rev      uint64
	dirty    bool      // fields changed since the last write took them
	lastSync time.Time // the heart's last row sync
	// The fields awaiting the next row write (model.Synced).
	lastSignalAt  time.Time
	snapshot      *jetruntype.ProgressSnapshot
	firstEventSeq uint64
	waitingFor    string            // what the handler waits for now
	waits         []string          // the nested runs and calls it waits for, newest last (run:<id>, call:<name>)
	signalsSeen   map[string]uint64 // signals received, not yet on the row

	woke func() // called, without the lock, after a field changed (rest.go); nil: none
}

// wake tells the heart a field changed (rest.go). Called without mu.
func (rw *rowWriter) wake() {
	if rw.woke != nil {
		rw.woke()
	}
}

// isDirty reports whether anything awaits a row write, or the claim is
// not written yet.
func (rw *rowWriter) isDirty() bool {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.dirty || rw.pending
}

func newRowWriter(store *runstore.Store, row *model.Row, rev uint64) *rowWriter {
	return &rowWriter{store: store, id: row.ID, turn: make(chan struct{}, 1), cur: row, rev: rev}
}

// write applies fn to the newest known row and stores it with a
// compare-and-set, falling back to a re-read (runstore.Store.MutateFrom).
// It waits for the attempt's write before it, or for ctx.
func (rw *rowWriter) write(ctx context.Context, fn func(*model.Row) error) (*model.Row, error) {
	select {
	case rw.turn <- struct{}{}:
	default:
		select {
		case rw.turn <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	defer func() { <-rw.turn }()
	rw.mu.Lock()
	cur, rev, pending := rw.cur, rw.rev, rw.pending // changed only under the turn
	rw.mu.Unlock()
	if pending {
		return nil, ErrLeaseLost // the attempt holds no row (yet)
	}
	row, rev, err := rw.store.MutateFrom(ctx, rw.id, cur, rev, fn)
	if errors.Is(err, runstore.ErrRunNotFound) {
		return nil, ErrLeaseLost // cleared
	}
	if err != nil {
		return nil, err
	}
	rw.mu.Lock()
	rw.cur, rw.rev = row, rev
	rw.mu.Unlock()
	return row, nil
}

// claimed records the attempt's claim, written late (lazy.go): row at
// revision rev.
func (rw *rowWriter) claimed(row *model.Row, rev uint64) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.cur, rw.rev, rw.pending = row, rev, false
}

// row is the newest row the attempt knows (read-only).
func (rw *rowWriter) row() *model.Row {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.cur
}

// noteSignal records, for the next row write, that the run showed signs of
// life at at, with an optional new progress snapshot.
func (rw *rowWriter) noteSignal(at time.Time, snap *jetruntype.ProgressSnapshot) {
	defer rw.wake()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if at.After(rw.lastSignalAt) {
		rw.lastSignalAt = at
	}
	if snap != nil {
		rw.snapshot = snap
	}
	rw.dirty = true
}

// markDirty says the next row write has something to take (usage, steps).
func (rw *rowWriter) markDirty() {
	defer rw.wake()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.dirty = true
}

// setFirstEvent records the stream sequence of the run's first event.
func (rw *rowWriter) setFirstEvent(seq uint64) {
	defer rw.wake()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.firstEventSeq, rw.dirty = seq, true
}

// firstEvent is the stream sequence of the run's first event, 0 when not
// known.
func (rw *rowWriter) firstEvent() uint64 {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return cmp.Or(rw.cur.FirstEventSeq, rw.firstEventSeq)
}

// waitSignal shows that the handler waits for the signal name; the
// returned function ends the wait (the next row write records it).
func (rw *rowWriter) waitSignal(name string) (end func()) {
	rw.mu.Lock()
	rw.waitingFor = name
	rw.mu.Unlock()
	return func() {
		defer rw.wake()
		rw.mu.Lock()
		defer rw.mu.Unlock()
		if rw.waitingFor == name {
			rw.waitingFor, rw.dirty = "", true
		}
	}
}

// beginWait shows that the handler waits for what, a nested run or a
// call, at once; the returned function ends the wait: the row then shows
// the newest wait left, and a sign of progress.
func (rw *rowWriter) beginWait(what string) (end func()) {
	rw.mu.Lock()
	rw.waits = append(rw.waits, what)
	rw.waitingFor, rw.dirty = what, true
	rw.mu.Unlock()
	rw.wake()
	return func() {
		defer rw.wake()
		rw.mu.Lock()
		defer rw.mu.Unlock()
		if i := slices.Index(rw.waits, what); i >= 0 {
			rw.waits = slices.Delete(rw.waits, i, i+1)
		}
		if rw.waitingFor == what {
			rw.waitingFor = ""
			if n := len(rw.waits); n > 0 {
				rw.waitingFor = rw.waits[n-1]
			}
		}
		if now := time.Now(); now.After(rw.lastSignalAt) {
			rw.lastSignalAt = now // the wait ended: a sign of progress
		}
		rw.dirty = true
	}
}

// seenSignal is the sequence of the last signal name the attempt
// received, on the row (row) or not yet.
func (rw *rowWriter) seenSignal(row *model.Row, name string) uint64 {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return max(row.SignalsSeen[name], rw.signalsSeen[name])
}

// sawSignal records that the signal name numbered seq was received: a
// sign of life at at.
func (rw *rowWriter) sawSignal(name string, seq uint64, at time.Time) {
	rw.mu.Lock()
	if rw.signalsSeen == nil {
		rw.signalsSeen = make(map[string]uint64)
	}
	rw.signalsSeen[name] = seq
	rw.mu.Unlock()
	rw.noteSignal(at, nil)
}

// startClock starts the row sync clock: the claim wrote the row at now.
func (rw *rowWriter) startClock(now time.Time) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.lastSync = now
}

// due says whether the row is due for a sync at now: it has changes
// pending and its last sync is every old.
func (rw *rowWriter) due(now time.Time, every time.Duration) bool {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if !rw.dirty || rw.pending || now.Sub(rw.lastSync) < every {
		return false
	}
	rw.lastSync = now
	return true
}

// take returns the pending fields as the row sync of holder by
// (model.Synced, without what other parts add), and clears the dirty
// mark: a change after it marks the row again.
func (rw *rowWriter) take(by model.Holder) model.Synced {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.dirty = false
	ev := model.Synced{
		By:            by,
		LastSignalAt:  rw.lastSignalAt,
		WaitingFor:    rw.waitingFor, // a wait that ended restarts the no-progress clock
		SignalsSeen:   maps.Clone(rw.signalsSeen),
		FirstEventSeq: rw.firstEventSeq,
	}
	if rw.snapshot != nil {
		s := *rw.snapshot
		ev.Progress = &s
	}
	return ev
}

// holder is the attempt as the row names it: every event of the attempt
// carries it, and the row refuses one it no longer holds.
func (e *execution) holder() model.Holder {
	return model.Holder{Worker: e.w.cfg.ID, Attempt: e.attempt}
}

// apply applies evs, the attempt's events, to r at now (model.ApplyAll):
// the attempt's fence. A row the attempt no longer holds (taken over,
// released, ended) refuses them: ErrLeaseLost.
func (e *execution) apply(r *model.Row, now time.Time, evs ...model.Event) error {
	err := model.ApplyAll(r, now, evs...)
	if errors.Is(err, model.ErrNotHolder) {
		return ErrLeaseLost
	}
	return err
}

// write applies fn to the newest known row and stores it (rowWriter.write).
func (e *execution) write(ctx context.Context, fn func(*model.Row) error) (*model.Row, error) {
	return e.rw.write(ctx, fn)
}

// noteSignal records, for the next row sync, that the run showed signs of
// life, with an optional new progress snapshot.
func (e *execution) noteSignal(at time.Time, snap *jetruntype.ProgressSnapshot) {
	e.rw.noteSignal(at, snap)
}

// synced is the attempt's row sync (model.Synced): the pending row
// fields, the counts of the events emitted and the usage, cumulative,
// hence idempotent, as runstore.Store.Mutate requires. Taking them clears
// the attempt's dirty mark, unless it holds usage reports not charged yet
// (the row stays due for a sync).
func (e *execution) synced() model.Synced {
	ev := e.rw.take(e.holder())
	chunks, milestone := e.emit.shown()
	ev.Chunks, ev.Milestones, ev.LastMilestone = chunks, milestone.Sequence, milestone.Name
	var behind bool
	ev.Usage, ev.StepUsage, ev.ChargeSteps, behind = e.syncedUsage()
	if behind {
		e.rw.markDirty()
	}
	return ev
}
