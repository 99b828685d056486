package parent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// clearWait bounds how long Clear waits for cancelled runs to stop before it
// erases them anyway (their workers are then fenced off: the row is gone).
const clearWait = 10 * time.Second

// ClearFilter selects runs to clear. Filters combine with AND; at least one
// must be set (or All).
type ClearFilter struct {
	// Statuses keeps runs in one of these statuses.
	Statuses []events.Status
	// OlderThan keeps runs that finished (or, if not finished, were
	// created) longer ago than this.
	OlderThan time.Duration
	// All clears every run when no other filter is set.
	All bool
}

func (f ClearFilter) match(r *model.Row, now time.Time) bool {
	if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, r.Status) {
		return false
	}
	if f.OlderThan > 0 {
		at := r.FinishedAt
		if at.IsZero() {
			at = r.CreatedAt
		}
		if now.Sub(at) < f.OlderThan {
			return false
		}
	}
	return true
}

// Clear removes the runs the filter selects: live ones are cancelled first
// (with their descendants) and given up to 10 s to stop; when a meter runs
// (package meter), Clear gives it up to 5 s to handle the runs' last status
// events; then each run's events, row and index entries are erased. A cleared run's finish may or
// may not have been delivered. It returns how many runs were erased.
func (c *Client) Clear(ctx context.Context, f ClearFilter) (int, error) {
	if len(f.Statuses) == 0 && f.OlderThan <= 0 && !f.All {
		return 0, fmt.Errorf("%w: clear needs statuses, an age, or All", ErrBadRequest)
	}
	for _, s := range f.Statuses {
		if !s.Valid() {
			return 0, fmt.Errorf("%w: unknown status %q", ErrBadRequest, s)
		}
	}
	now := time.Now()
	rows, err := c.store.List(ctx, func(r *model.Row) bool { return f.match(r, now) })
	if err != nil {
		return 0, fmt.Errorf("parent: clear: %w", err)
	}
	var live []string
	for _, r := range rows {
		if r.Live() {
			if _, err := c.Cancel(ctx, r.ID, "cleared"); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
				return 0, fmt.Errorf("parent: clear: %w", err)
			}
			live = append(live, r.ID)
		}
	}
	c.waitStopped(ctx, live)
	c.waitMetered(ctx, rows)
	n := 0
	for _, r := range rows {
		cur, _, err := c.store.Get(ctx, r.ID)
		if errors.Is(err, runstore.ErrRunNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("parent: clear: %w", err)
		}
		if err := c.rt.Erase(ctx, cur); err != nil {
			return n, fmt.Errorf("parent: clear: %w", err)
		}
		n++
	}
	c.log.InfoContext(ctx, "cleared runs", "count", n)
	return n, nil
}

// meterWait bounds how long Clear waits for the meter to handle the runs'
// last status events before it erases them.
const meterWait = 5 * time.Second

// waitMetered waits, up to meterWait, until the meter's consumer (package
// meter), if there is one, has handled the last status event of each run,
// so a cleared run's finish (aborted, for a run the clear cancelled) is
// metered before its events are erased.
func (c *Client) waitMetered(ctx context.Context, rows []*model.Row) {
	if len(rows) == 0 {
		return
	}
	names := c.rt.EventsStreamNames()
	last := make([]uint64, len(names)) // per events stream
	for _, r := range rows {
		p := wire.Partition(r.ID, len(names))
		if msg, err := c.rt.EventsStreamFor(r.ID).GetLastMsgForSubject(ctx, c.ns.RunSubject(r.ID, events.KindStatus)); err == nil {
			last[p] = max(last[p], msg.Sequence)
		}
	}
	for p, stream := range names {
		if last[p] > 0 {
			c.waitMeteredOn(ctx, stream, last[p])
		}
	}
}

// waitMeteredOn waits, up to meterWait, until the meter's consumer on
// events stream stream, if there is one, has handled sequence last.
func (c *Client) waitMeteredOn(ctx context.Context, stream string, last uint64) {
	cons, err := c.js.Consumer(ctx, stream, wire.MeterConsumer)
	if err != nil {
		return // nobody meters
	}
	deadline := time.Now().Add(meterWait)
	for ctx.Err() == nil {
		info, err := cons.Info(ctx)
		if err != nil || info.AckFloor.Stream >= last || !time.Now().Before(deadline) {
			if err == nil && info.AckFloor.Stream < last {
				c.log.WarnContext(ctx, "clearing runs the meter has not handled yet", "meter_ack_floor", info.AckFloor.Stream,
					"last_status_seq", last)
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitStopped waits, up to clearWait, until none of the runs is live.
func (c *Client) waitStopped(ctx context.Context, ids []string) {
	deadline := time.Now().Add(clearWait)
	for len(ids) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		ids = slices.DeleteFunc(ids, func(id string) bool {
			r, _, err := c.store.Get(ctx, id)
			return err != nil || !r.Live()
		})
		if len(ids) > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}
