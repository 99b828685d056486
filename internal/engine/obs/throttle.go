package obs

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultLogEvery is a Throttle's interval when none is given.
const DefaultLogEvery = 10 * time.Second

// Throttle rate-limits log lines per class (typically a loop's name and
// the class of a fault): the first line of a class is written, then at
// most one per interval, carrying the count of the lines suppressed since
// the previous one ("suppressed"). An outage of any length so costs a
// bounded number of lines: at most 1 + length/interval per class. A
// Throttle is safe for concurrent use; the zero value uses
// DefaultLogEvery.
type Throttle struct {
	// Every is the interval between two lines of a class.
	Every time.Duration

	mu      sync.Mutex
	classes map[string]*throttled
}

type throttled struct {
	last       time.Time
	suppressed int
}

// Allow reports whether a line of class may be written now and, if so, how
// many were suppressed before it.
func (t *Throttle) Allow(class string) (ok bool, suppressed int) {
	every := t.Every
	if every <= 0 {
		every = DefaultLogEvery
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.classes == nil {
		t.classes = map[string]*throttled{}
	}
	c := t.classes[class]
	if c == nil {
		if len(t.classes) >= maxClasses {
			clear(t.classes) // a bound on memory; costs at most one extra line per class
		}
		t.classes[class] = &throttled{last: now}
		return true, 0
	}
	if now.Sub(c.last) < every {
		c.suppressed++
		return false, 0
	}
	n := c.suppressed
	c.last, c.suppressed = now, 0
	return true, n
}

// maxClasses bounds the classes a Throttle remembers.
const maxClasses = 1024

// Log writes msg with args at level to logger unless a line of class was
// written less than an interval ago; a line written after suppressed ones
// carries their count as "suppressed".
func (t *Throttle) Log(ctx context.Context, logger *slog.Logger, level slog.Level, class, msg string, args ...any) {
	if logger == nil || !logger.Enabled(ctx, level) {
		return
	}
	ok, n := t.Allow(class)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	logger.Log(ctx, level, msg, args...)
}
