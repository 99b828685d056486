package runstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// Snapshot is one observed state of a row.
type Snapshot struct {
	Run      *model.Row // nil when Deleted
	Revision uint64
	Deleted  bool
}

// Watcher follows one row. Updates delivers the latest snapshot: a slow reader
// skips intermediate states but always sees the newest one. A Watcher repairs
// itself: if the server-side watch breaks (a reconnect, nats.go #1777) it is
// re-created from the last revision seen, and the row is re-read every
// resyncInterval in case an update was missed.
type Watcher struct {
	updates chan Snapshot
	cancel  context.CancelFunc
	done    chan struct{}
}

const resyncInterval = 10 * time.Second

// Watch starts following the row of run id: first its current state (if it
// exists), then every change, until ctx is done or Stop is called.
func (s *Store) Watch(ctx context.Context, id string) (*Watcher, error) {
	if err := events.ValidateID(id); err != nil {
		return nil, fmt.Errorf("kv: watch run: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	jw, err := s.kv.Watch(ctx, id)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kv: watch run %s: %w", id, err)
	}
	w := &Watcher{updates: make(chan Snapshot, 1), cancel: cancel, done: make(chan struct{})}
	go w.loop(ctx, s, id, jw)
	return w, nil
}

// Updates returns the channel of snapshots. It is never closed; select on it
// together with your own context.
func (w *Watcher) Updates() <-chan Snapshot { return w.updates }

// Stop ends the watch and waits for its goroutine. It is idempotent.
func (w *Watcher) Stop() {
	w.cancel()
	<-w.done
}

func (w *Watcher) publish(s Snapshot) {
	select {
	case w.updates <- s:
	default:
		select { // replace the unread older snapshot
		case <-w.updates:
		default:
		}
		w.updates <- s
	}
}

func (w *Watcher) loop(ctx context.Context, s *Store, id string, jw jetstream.KeyWatcher) {
	defer close(w.done)
	defer func() {
		if jw != nil { // nil when a re-watch gave up because ctx ended
			_ = jw.Stop()
		}
	}()
	var last uint64
	resync := time.NewTicker(resyncInterval)
	defer resync.Stop()
	bo := jsfault.NewBackOff(rewatchPause) // reset by an update
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-jw.Updates():
			if !ok {
				_ = jw.Stop()
				jw = nil
				if jsfault.Sleep(ctx, bo.NextBackOff()) != nil {
					return
				}
				jw = w.rewatch(ctx, s, id, last)
				if jw == nil {
					return
				}
				continue
			}
			bo.Reset()
			if e == nil || e.Revision() <= last {
				continue
			}
			last = e.Revision()
			if e.Operation() != jetstream.KeyValuePut {
				w.publish(Snapshot{Revision: last, Deleted: true})
				continue
			}
			r, err := Decode(id, e.Value())
			if err != nil {
				continue
			}
			w.publish(Snapshot{Run: r, Revision: last})
		case <-resync.C:
			r, rev, err := s.Get(ctx, id)
			if err == nil && rev > last {
				last = rev
				w.publish(Snapshot{Run: r, Revision: rev})
			}
		}
	}
}

// rewatch re-creates a broken server-side watch, resuming after revision
// last. It returns nil only when ctx is done.
func (w *Watcher) rewatch(ctx context.Context, s *Store, id string, last uint64) jetstream.KeyWatcher {
	delay := 50 * time.Millisecond
	for {
		var opts []jetstream.WatchOpt
		if last > 0 {
			opts = append(opts, jetstream.ResumeFromRevision(last+1))
		}
		jw, err := s.kv.Watch(ctx, id, opts...)
		if err == nil {
			return jw
		}
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// updates yields w's entries (nil marks the end of the initial values)
// until its channel closes or ctx ends. nats.go closes the channel when the
// watch's subscription closes; a watch stopped by its context mid-load was
// seen (under load) to leave it open, so the context ends the loop too.
func updates(ctx context.Context, w jetstream.KeyWatcher) iter.Seq[jetstream.KeyValueEntry] {
	return func(yield func(jetstream.KeyValueEntry) bool) {
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok || !yield(e) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}
}
