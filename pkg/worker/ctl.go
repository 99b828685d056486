package worker

import (
	"context"
	"sync"
	"time"
)

// attemptCtl is an attempt's life: the handler's context and its cancel,
// whether the attempt began and ended, what ended it (for the Observer),
// and whether a lapse of the worker's liveness stopped it. Its lock is a
// leaf: it is never held while the handler's context is cancelled, or
// while anything else is called.
type attemptCtl struct {
	mu        sync.Mutex
	ctx       context.Context
	cancel    context.CancelCauseFunc // set once the handler's context exists
	attempt   int                     // the attempt the context is for
	cancelFor int                     // the attempt named by a cancel that came before the context
	stoppedAt time.Time               // when the heart first saw the handler's context ended
	begun     bool                    // the attempt started: the heart tends it
	begunAt   time.Time
	ended     bool   // the attempt's outcome is being written (by the handler's return or the heart)
	lapsed    bool   // stopped by a lapse of the worker's liveness (Worker.lapse)
	outcome   string // what ended it (RunEnd.Outcome)
	reason    string // and its status reason
}

// open sets the handler's context of attempt, cancelled (ErrCancelled)
// at once when cancelled says so or a cancel of attempt came before. It
// reports whether a lapse stopped the attempt while it was being claimed.
func (c *attemptCtl) open(ctx context.Context, cancel context.CancelCauseFunc, attempt int, cancelled bool) (lapsed bool) {
	c.mu.Lock()
	c.ctx, c.cancel, c.attempt = ctx, cancel, attempt
	cancelled = cancelled || c.cancelFor == attempt
	lapsed = c.lapsed
	c.mu.Unlock()
	if cancelled {
		cancel(ErrCancelled)
	}
	return lapsed
}

// begin records that the attempt started at now: the heart tends it.
func (c *attemptCtl) begin(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.begun, c.begunAt = true, now
}

// end marks the attempt ended; first says this call did.
func (c *attemptCtl) end() (first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first, c.ended = !c.ended, true
	return first
}

func (c *attemptCtl) isEnded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// live reports whether the attempt began and has not ended: what the
// heart tends.
func (c *attemptCtl) live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begun && !c.ended
}

// stuck reports whether the handler's context ended more than lease
// before now (as the heart saw it) and the attempt has not ended.
func (c *attemptCtl) stuck(now time.Time, lease time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended || c.ctx == nil || c.ctx.Err() == nil {
		return false
	}
	if c.stoppedAt.IsZero() {
		c.stoppedAt = now
	}
	return now.Sub(c.stoppedAt) > lease
}

// setOutcome records what ended the attempt, for the Observer.
func (c *attemptCtl) setOutcome(outcome, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outcome, c.reason = outcome, reason
}

// observed is what the Observer is told of the attempt's end.
func (c *attemptCtl) observed() (begun bool, begunAt time.Time, outcome, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begun, c.begunAt, c.outcome, c.reason
}

// context is the handler's context (nil before open).
func (c *attemptCtl) context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctx
}

// requestCancel cancels the handler (cause ErrCancelled) if attempt is
// the one it runs, or remembers the cancel for when the handler starts
// (the claim then says which attempt it runs). A cancel of another
// attempt, an earlier one's that arrives late, is not this one's.
func (c *attemptCtl) requestCancel(attempt int) {
	c.mu.Lock()
	cancel := c.cancel
	if cancel == nil {
		c.cancelFor = max(c.cancelFor, attempt) // attempts only grow: the newest cancel is the one that may be this attempt's
	}
	mine := attempt == c.attempt
	c.mu.Unlock()
	if cancel != nil && mine {
		cancel(ErrCancelled)
	}
}

// cancelWith ends the handler's context with cause (first cause wins).
func (c *attemptCtl) cancelWith(cause error) {
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// lapse marks the attempt stopped by a lapse of the worker's liveness;
// opened says its handler's context exists (the attempt is past open).
func (c *attemptCtl) lapse() (opened bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lapsed = true
	return c.cancel != nil
}

func (c *attemptCtl) isLapsed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lapsed
}
