// Package kv is a typed, read-only view of jetrun's run rows for services
// that show runs or react to them without driving any: get one row, list
// rows, watch rows change.
//
// It writes nothing, so it needs no more than the viewer role of the shipped
// nats-users.conf (reads of the runs bucket: direct gets and ordered
// consumers), once a process that may create them (a parent-worker) has
// created the streams and buckets:
//
//	nc, _ := nats.Connect(url, nats.UserInfo("viewer", password))
//	rt, _ := jetrun.Open(ctx, nc, jetrun.Config{})
//	runs := kv.New(rt)
//
// Invariants:
//   - Rows are the read type [jetruntype.Run], a copy built for each read;
//     how they are stored (bucket, revisions, the active-run index, the
//     engine's bookkeeping) stays inside jetrun.
//   - A row read is the row as its last compare-and-set wrote it: a final
//     status (completed, error, aborted) never changes again.
//   - Get and List retry transient faults (a server restarting, a leader
//     election) for up to [DefaultRetry]; a watch that the server ends
//     yields an error, and watching again delivers the rows' current
//     state, so nothing is missed.
//
// The parent client's Inspect and List (package parent) read through Runs.
package kv

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// DefaultRetry bounds how long [Runs.Get] and [Runs.List] retry transient
// faults.
const DefaultRetry = 10 * time.Second

// ErrRunNotFound is returned (wrapped) by [Runs.Get] for a run id with no
// row: never dispatched, or cleared. Test with errors.Is.
var ErrRunNotFound = jetruntype.ErrRunNotFound

// Runs reads the run rows of one [jetrun.Runtime]. It is safe for
// concurrent use.
type Runs struct {
	store *runstore.Store
}

// New returns the rows of rt. It does no I/O.
func New(rt *jetrun.Runtime) *Runs {
	return &Runs{store: engine.From(rt).Store()}
}

// Get returns the row of run id, or an error wrapping [ErrRunNotFound]
// when there is none, or [events.ErrInvalidID] for an id that cannot be a
// run's.
func (r *Runs) Get(ctx context.Context, id string) (*jetruntype.Run, error) {
	var row *model.Row
	err := jsfault.Retry(ctx, DefaultRetry, func(ctx context.Context) (err error) {
		row, _, err = r.store.Get(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return row.View(), nil
}

// ListOptions selects the rows [Runs.List] returns. Fields combine with
// AND; the zero value selects every row.
type ListOptions struct {
	// Statuses keeps the rows in one of these statuses.
	Statuses []events.Status
	// AgentType keeps the runs of this agent type.
	AgentType string
	// Parent keeps the runs dispatched by this run (its children).
	Parent string
	// ParentToolCallID keeps the runs dispatched for this tool call.
	ParentToolCallID string
}

func (o ListOptions) keep(r *model.Row) bool {
	return (len(o.Statuses) == 0 || slices.Contains(o.Statuses, r.Status)) &&
		(o.AgentType == "" || r.AgentType == o.AgentType) &&
		(o.Parent == "" || r.Parent == o.Parent) &&
		(o.ParentToolCallID == "" || r.ParentToolCallID == o.ParentToolCallID)
}

// List returns the rows opts selects, newest first (then by id). It reads
// every row in one pass: for a view that stays current, [Runs.Watch] once
// and keep the rows.
func (r *Runs) List(ctx context.Context, opts ListOptions) ([]*jetruntype.Run, error) {
	var rows []*model.Row
	err := jsfault.Retry(ctx, DefaultRetry, func(ctx context.Context) (err error) {
		rows, err = r.store.List(ctx, opts.keep)
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rows, func(a, b *model.Row) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return model.Views(rows), nil
}

// WatchOptions selects the rows [Runs.Watch] follows. The zero value
// follows every row, from its current state.
type WatchOptions struct {
	// ID, when set, follows that run's row alone.
	ID string
	// UpdatesOnly skips the rows' current state: the watch yields the
	// changes written after it started, and no Loaded marker.
	UpdatesOnly bool
}

// Change is one step of a [Runs.Watch]: a row as written, a row removed,
// or the marker after the rows' current state.
type Change struct {
	// ID is the run's id; empty on the Loaded marker.
	ID string
	// Run is the row as written; nil when the run was cleared (or its row
	// cannot be read).
	Run *jetruntype.Run
	// Revision orders the changes: it grows with every write to the
	// rows, and a row's revision changes with each of its writes.
	Revision uint64
	// Loaded marks the end of the rows' current state: every row that
	// existed when the watch started came before it.
	Loaded bool
}

// Watch yields the rows opts selects as they are (each once, in no set
// order), then a Change with Loaded set, then every change as it is
// written, until ctx ends or the loop breaks. If the server ends the watch (a
// reconnect that could not resume it, the bucket re-created), Watch yields
// an error and ends: watch again, and the rows' current state comes first
// again, so a row removed meanwhile is noticed by its absence.
func (r *Runs) Watch(ctx context.Context, opts WatchOptions) iter.Seq2[Change, error] {
	return func(yield func(Change, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := r.store.WatchRows(ctx, runstore.RowWatchOptions{ID: opts.ID, UpdatesOnly: opts.UpdatesOnly})
		if err != nil {
			yield(Change{}, err)
			return
		}
		defer w.Stop()
		for c := range w.Changes() {
			if !yield(Change{ID: c.ID, Run: c.Run.View(), Revision: c.Revision, Loaded: c.Loaded}, nil) {
				return
			}
		}
		if ctx.Err() == nil {
			yield(Change{}, errors.New("kv: watch runs: the server ended the watch; watch again"))
		}
	}
}
