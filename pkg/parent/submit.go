package parent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/keys"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// ErrKeyBusy is returned by Dispatch and Run for a submit with strategy
// drop while a run of its concurrency key is live or queued; the run id is
// not used, so the same request can be made again later.
var ErrKeyBusy = jetruntype.ErrKeyBusy

// keyed copies the concurrency key fields of req onto d and checks them.
func (req Request) keyed(d *events.Dispatch) []error {
	var errs []error
	d.ConcurrencyKey, d.Strategy = req.ConcurrencyKey, req.Strategy
	switch {
	case req.Debounce < 0:
		errs = append(errs, fmt.Errorf("debounce must not be negative, got %s", req.Debounce))
	case req.Debounce > 0 && req.Debounce < time.Millisecond:
		errs = append(errs, fmt.Errorf("debounce is counted in milliseconds, got %s", req.Debounce))
	default:
		d.DebounceMs = req.Debounce.Milliseconds()
	}
	if req.ConcurrencyKey != "" && req.MaxConcurrent > 0 {
		errs = append(errs, errors.New("maxConcurrent and concurrencyKey cannot be combined"))
	}
	return errs
}

// dispatchKeyed dispatches a run under a concurrency key: the key's
// strategy decides whether it starts now, waits queued, or is refused
// (keys.Submit). An existing run id is re-attached, as for any dispatch.
func (c *Client) dispatchKeyed(ctx context.Context, req Request, d events.Dispatch) (*model.Row, bool, error) {
	if existing, _, err := c.lookup(ctx, d.RunID); err == nil {
		row, err := c.existing(ctx, existing, req)
		return row, false, err
	} else if !errors.Is(err, runstore.ErrRunNotFound) {
		return nil, false, fmt.Errorf("parent: dispatch run %s: %w", d.RunID, err)
	}
	row, err := keys.Submit(ctx, c.rt, model.NewRun(req.AgentType, d, 0, time.Now()), keys.Held{})
	if errors.Is(err, runstore.ErrRunExists) {
		existing, _, err := c.get(ctx, d.RunID)
		if err != nil {
			return nil, false, fmt.Errorf("parent: dispatch run %s: %w", d.RunID, err)
		}
		row, err := c.existing(ctx, existing, req)
		return row, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("parent: dispatch run %s: %w", d.RunID, err)
	}
	return row, true, nil
}

// requeue resumes an interrupted keyed run whose child stopped: it waits
// for its key again (runstore.Store.Requeue), so it never runs alongside the
// run that holds the key now.
func (c *Client) requeue(ctx context.Context, row *model.Row) (*model.Row, error) {
	next, err := keys.Requeue(ctx, c.rt, row)
	if err != nil {
		return nil, fmt.Errorf("parent: resume run %s: %w", row.ID, err)
	}
	return next, nil
}

// advanceKey hands the key of a keyed run this client ended (a cancel
// before any worker ran it) to the next run. A failure is logged: the
// reconciler advances the key of every queued run.
func (c *Client) advanceKey(ctx context.Context, row *model.Row) {
	if row.ConcurrencyKey == "" {
		return
	}
	if err := keys.Advance(ctx, c.rt, row.ConcurrencyKey, keys.Held{}); err != nil {
		c.fault(ctx, "advance concurrency key", err, "run_id", row.ID, "key", row.ConcurrencyKey)
	}
}
