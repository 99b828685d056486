package eventline

import (
	"context"
	"sync"
	"time"

	"github.com/jetrun/jetrun/pkg/worker"
)

// UsageHold is how long a usage line waits for the line after it: a child
// that reports what a piece of work spent and then stores the work as a
// step writes the two lines one after the other.
const UsageHold = time.Second

// Applier maps a child's run events onto its run, as Apply does, for one
// response (http) or one command (exec). A usage line waits for the line
// after it, at most UsageHold: when that line is a step line, the usage is
// the step's, as the step line's own "usage" is (stored with the step and
// counted on the run once, with it, whatever dies when); otherwise, or when
// no line comes in time, it is the run's, as a usage line on its own is.
// Call Flush before acting on any other line (a wait, a call, the result)
// and Close when the child's lines end.
type Applier struct {
	run *worker.Run

	mu     sync.Mutex
	held   []worker.Usage
	hold   *time.Timer // runs out the pending hold; nil when none is pending
	timers sync.WaitGroup
	err    error // of usage applied when its hold ran out
}

// NewApplier returns an Applier for run.
func NewApplier(run *worker.Run) *Applier { return &Applier{run: run} }

// Apply maps ev onto the run: a chunk, progress, milestone, step or usage
// event (see Apply); a usage line is held back (see Applier).
func (a *Applier) Apply(ctx context.Context, ev Event) error {
	switch ev.Kind {
	case KindUsage:
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.err != nil {
			return a.err
		}
		a.held = append(a.held, ev.Usage)
		if a.hold == nil {
			a.timers.Add(1)
			var t *time.Timer
			t = time.AfterFunc(UsageHold, func() {
				defer a.timers.Done()
				a.mu.Lock()
				defer a.mu.Unlock()
				if a.hold == t { // set before this runs: a.mu is held meanwhile
					_ = a.flushLocked(ctx) // the error is kept for the next line
				}
			})
			a.hold = t
		}
		return nil
	case KindStep:
		a.mu.Lock()
		held, err := a.held, a.err
		a.held = nil
		a.stopLocked()
		a.mu.Unlock()
		if err != nil {
			return err
		}
		return storeStep(ctx, a.run, ev, held)
	}
	if err := a.Flush(ctx); err != nil {
		return err
	}
	return Apply(ctx, a.run, ev)
}

// Flush applies the usage lines held back to the run, as its own.
func (a *Applier) Flush(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked(ctx)
}

// Close flushes what is held and waits until no hold is running out.
func (a *Applier) Close(ctx context.Context) error {
	err := a.Flush(ctx)
	a.timers.Wait()
	return err
}

// stopLocked ends the pending hold, if any.
func (a *Applier) stopLocked() {
	if a.hold != nil && a.hold.Stop() {
		a.timers.Done() // it will not run
	}
	a.hold = nil
}

func (a *Applier) flushLocked(ctx context.Context) error {
	held := a.held
	a.held = nil
	a.stopLocked()
	if err := report(ctx, a.run, held); err != nil && a.err == nil {
		a.err = err
	}
	return a.err
}
