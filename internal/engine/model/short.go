package model

import (
	"encoding/json"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// EndedWithoutClaim: an attempt that never claimed the run ends it (a
// short run, see worker's claim window): a handler that returned before it
// emitted anything and within the window stores its ending only. The run
// must still wait for a worker (starting) at the attempt before Attempt,
// so of two attempts of one run that ran side by side unclaimed (a
// duplicate dispatch) at most one ends it, and none once any attempt
// claimed it; any other row refuses it (ErrNotHolder). The row is ended
// as Ended ends it, with the attempt counted and StartedAt, when the
// handler began (never before the run was created or became ready), so
// the ending shows its start. Applied to the row it wrote (a retry after
// a lost answer), it changes nothing (ErrNoChange).
type EndedWithoutClaim struct {
	Attempt     int
	DispatchSeq uint64
	StartedAt   time.Time
	Status      events.Status
	Reason      string
	Error       string
	Summary     string
	Output      json.RawMessage
}

func (ev EndedWithoutClaim) apply(r *Row, now time.Time) error {
	if !ev.Status.Final() || ev.Attempt < 1 {
		return refuse(ev, r, ErrNotAllowed)
	}
	if r.Status.Final() && r.Attempt == ev.Attempt && r.DispatchSeq == ev.DispatchSeq &&
		r.StartedAt.Equal(ev.startedAt(r)) && r.Status == ev.Status {
		return ErrNoChange // its own write
	}
	if r.Status != events.StatusStarting || r.Attempt != ev.Attempt-1 {
		return refuse(ev, r, ErrNotHolder)
	}
	started := ev.startedAt(r)
	r.Attempt = ev.Attempt
	r.DispatchSeq = ev.DispatchSeq
	r.end(ev.Status, ev.Reason, ev.Error, now)
	r.StartedAt = started
	if ev.Status == events.StatusCompleted {
		r.Summary, r.Output = ev.Summary, ev.Output
	}
	return nil
}

// startedAt is when the attempt began as r records it: not before r was
// created or became ready (clocks of the writers differ).
func (ev EndedWithoutClaim) startedAt(r *Row) time.Time {
	s := ev.StartedAt
	if s.Before(r.CreatedAt) {
		s = r.CreatedAt
	}
	if s.Before(r.ReadyAt) {
		s = r.ReadyAt
	}
	return s
}
