package model

import (
	"maps"
	"slices"

	"github.com/jetrun/jetrun/pkg/events"
)

// HeldBy reports whether worker holds r at attempt (expired or not).
func (r *Row) HeldBy(worker string, attempt int) bool {
	return r.Worker == worker && r.Attempt == attempt
}

// Clone returns a deep copy of r.
func (r *Row) Clone() *Row {
	c := new(Row)
	*c = *r
	if r.Detached != nil {
		d := *r.Detached
		c.Detached = &d
	}
	if r.Progress != nil {
		p := *r.Progress
		c.Progress = &p
	}
	if r.Merged != nil {
		c.Merged = append([]string(nil), r.Merged...)
	}
	c.Blinks = slices.Clone(r.Blinks)
	c.Delivered = maps.Clone(r.Delivered)
	c.SignalsSeen = maps.Clone(r.SignalsSeen)
	if r.Finishes != nil {
		c.Finishes = make(map[events.Status]*FinishState, len(r.Finishes))
		for k, v := range r.Finishes {
			f := *v
			c.Finishes[k] = &f
		}
	}
	c.Notices = cloneNotices(r.Notices)
	cloneTreeFields(c, r)
	return c
}

// refundBlink records that attempt ended in a lapse of its worker's
// liveness (see Blinks): it counts as a hand-off, not against the attempt
// limit (once: not again if it was handed off already). It is idempotent
// per attempt and reports whether it changed r.
//
// Only the last attempt counted as a hand-off is known (HandedOff): every
// attempt counted has a number at most HandedOff, so an attempt after it
// is refunded, and one at or before it is not (it may have been counted
// when the run was resumed: a lost refund costs the run one attempt of
// its limit, a double one would widen the limit).
func (r *Row) refundBlink(attempt int) bool {
	if attempt < 1 || attempt > r.Attempt || slices.Contains(r.Blinks, attempt) {
		return false
	}
	r.Blinks = append(r.Blinks, attempt)
	if attempt > r.HandedOff {
		r.Handoffs++
	}
	if attempt == r.Attempt {
		r.HandedOff = attempt
	}
	return true
}

// handOff counts r's current attempt as a hand-off (handed back, released
// after a fault, given up and retried): it does not count against the
// attempt limit. An attempt counts once, so it reports false (and changes
// nothing) when no attempt ran since the last one counted.
func (r *Row) handOff() bool {
	if r.Attempt < 1 || r.HandedOff >= r.Attempt || slices.Contains(r.Blinks, r.Attempt) {
		return false
	}
	r.HandedOff = r.Attempt
	r.Handoffs++
	return true
}
