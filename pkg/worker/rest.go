package worker

import "time"

// A resting run costs the heart nothing (docs/leases.md, "A waiting run
// costs nothing"). A run whose dispatch is shelved, whose handler is
// parked, and that has nothing pending for the heart (no row fields to
// write, no hold to renew, no event in flight, a live handler context)
// is left out of the heart's beats until something wakes it:
//   - its handler unparks (parking.unpark);
//   - its handler's context ends (a cancel, a lapse, a lost lease: the
//     heart must see a handler that ignores it, attemptCtl.stuck);
//   - a row field changes (rowWriter), a hold is opened (Reserve), or an
//     event is published (publisher);
//   - every restSweep, when the heart wakes every resting run at once, so
//     a shelved dispatch is refused again well before its delay runs out
//     (reshelve).
//
// So what the heart does per beat does not grow with the runs that wait:
// 100,000 parked runs cost it one visit each every restSweep.
//
// A wake never misses a run the heart puts to rest: the heart marks the
// run resting before it checks that nothing is pending, and a waker
// changes what it changes before it looks at the mark.

// restSweep is how often the heart wakes every resting run: well within
// half of shelfDelay, when a shelved dispatch is refused again.
const restSweep = 5 * time.Minute

// restful reports whether the heart may leave e out of its beats: its
// dispatch is shelved, its handler parked and its context live, and
// nothing is pending for the heart.
func (e *execution) restful() bool {
	if !e.quiet() || !e.ctl.live() {
		return false
	}
	if ctx := e.ctl.context(); ctx == nil || ctx.Err() != nil {
		return false
	}
	return !e.rw.isDirty() && !e.holds.anyOpen() && e.pub.idle()
}

// rest leaves e out of the heart's beats, unless something is pending for
// it by the time it is marked.
func (w *Worker) rest(e *execution) {
	w.mu.Lock()
	if w.active[e.id] != e {
		w.mu.Unlock()
		return
	}
	e.resting.Store(true)
	delete(w.awake, e.id)
	w.mu.Unlock()
	if !e.restful() {
		e.wake()
	}
}

// wake puts e back in the heart's beats if it rests. Whoever changes what
// restful reads calls it after the change.
func (e *execution) wake() {
	if !e.resting.Load() {
		return
	}
	w := e.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.resting.CompareAndSwap(true, false) && w.active[e.id] == e {
		w.awake[e.id] = e
	}
}

// wakeAll puts every resting run back in the heart's beats (restSweep).
func (w *Worker) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, e := range w.active {
		if e.resting.CompareAndSwap(true, false) {
			w.awake[id] = e
		}
	}
}

// resting counts the runs the heart leaves out of its beats.
func (w *Worker) restingRuns() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.active) - len(w.awake)
}
