package runstore

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// RowChange is one entry of a RowWatch.
type RowChange struct {
	// ID is the row's key. Empty on the marker that ends the initial state.
	ID string
	// Run is the row as written, nil when it was removed (or is not a row
	// this version can read).
	Run      *model.Row
	Revision uint64
	// Loaded marks the end of the initial state: every row that existed
	// when the watch started has been delivered before it.
	Loaded bool
}

// RowWatch follows every row of the runs bucket: first the current rows,
// then a Loaded marker, then each change as it is written. It does not
// repair itself: when the server-side watch breaks, Changes ends, and the
// caller starts a new one (and reloads).
type RowWatch struct {
	w   jetstream.KeyWatcher
	ctx context.Context
}

// RowWatchOptions narrows a RowWatch. The zero value follows every row
// from its current state.
type RowWatchOptions struct {
	// ID, when set, follows that run's row alone.
	ID string
	// UpdatesOnly skips the rows' current state: the watch delivers the
	// changes written after it started, and no Loaded marker.
	UpdatesOnly bool
}

// WatchRows starts following the rows opts selects, until ctx ends or Stop
// is called.
func (s *Store) WatchRows(ctx context.Context, opts RowWatchOptions) (*RowWatch, error) {
	key := ">"
	if opts.ID != "" {
		if err := events.ValidateID(opts.ID); err != nil {
			return nil, fmt.Errorf("kv: watch run: %w", err)
		}
		key = opts.ID
	}
	var wopts []jetstream.WatchOpt
	if opts.UpdatesOnly {
		wopts = append(wopts, jetstream.UpdatesOnly())
	}
	w, err := s.kv.Watch(ctx, key, wopts...)
	if err != nil {
		return nil, fmt.Errorf("kv: watch runs: %w", err)
	}
	return &RowWatch{w: w, ctx: ctx}, nil
}

// Changes yields the rows and their changes until the watch breaks or is
// stopped.
func (w *RowWatch) Changes() iter.Seq[RowChange] {
	return func(yield func(RowChange) bool) {
		for e := range updates(w.ctx, w.w) {
			var c RowChange
			if e == nil {
				c.Loaded = true
			} else {
				c.ID, c.Revision = e.Key(), e.Revision()
				if e.Operation() == jetstream.KeyValuePut {
					c.Run, _ = Decode(e.Key(), e.Value())
				}
			}
			if !yield(c) {
				return
			}
		}
	}
}

// Stop ends the watch.
func (w *RowWatch) Stop() { _ = w.w.Stop() }

// LastRevision is the runs bucket's newest revision: every row written up
// to it is in the state a RowWatch started after this call loads.
func (s *Store) LastRevision(ctx context.Context) (uint64, error) {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("kv: runs bucket status: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, errors.New("kv: runs bucket status has no stream info")
	}
	return bs.StreamInfo().State.LastSeq, nil
}
