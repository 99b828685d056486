package worker

import (
	"context"
	"errors"
	"sync"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
)

// Reservation writes of one worker to one budget row go together: while
// one compare-and-set on the row is under way, the reservations and
// releases asked for meanwhile by the worker's other runs queue, and the
// next write applies them all (each refused or taken on its own, in the
// order asked). Runs of one tree on one worker then do not race each
// other for the row, which is what bounds reservations per second on a
// tree. The caller whose request finds no write under way writes; when
// its write is answered it hands the queue to the first request queued
// (that caller writes next), so no caller writes for others for long.
// Charges (usage reports) do not go through here: a tree that is not
// reserved on is written as before.

// holdBatches are the worker's queues of reservation writes, by budget row.
type holdBatches struct {
	mu   sync.Mutex
	rows map[string]*holdBatch
}

// holdBatch is the queue of one budget row; mu guards it.
type holdBatch struct {
	mu      sync.Mutex
	queue   []*holdReq
	writing bool // a caller writes the row (or was handed the queue)
}

// holdReq is one write asked for: fn as a Mutate function that leaves
// the row as it was when it returns an error.
type holdReq struct {
	fn     func(*model.Row) error
	done   chan error    // its answer (buffered)
	lead   chan struct{} // closed when the queue is handed to it
	handed bool          // lead was closed (under the batch's mu)
}

// apply applies fn to budget row id, with the worker's other writes to
// that row queued meanwhile; fn must leave the row as it was when it
// returns an error, and its ErrNoChange is no error.
func (hb *holdBatches) apply(ctx context.Context, store *runstore.Store, id string, fn func(*model.Row) error) error {
	b := hb.batch(id)
	req := &holdReq{fn: fn, done: make(chan error, 1), lead: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, req)
	leads := !b.writing
	if leads {
		b.writing, req.handed = true, true
		close(req.lead)
	}
	b.mu.Unlock()
	select {
	case err := <-req.done:
		return err
	case <-req.lead:
		hb.write(b, store, id)
		return <-req.done
	case <-ctx.Done():
		b.mu.Lock()
		handed := req.handed
		if !handed {
			for i, q := range b.queue {
				if q == req {
					b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
					break
				}
			}
		}
		b.mu.Unlock()
		if handed {
			hb.write(b, store, id) // the queue is this caller's to write: others wait on it
		}
		return context.Cause(ctx)
	}
}

// batch returns the queue of row id.
func (hb *holdBatches) batch(id string) *holdBatch {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.rows == nil {
		hb.rows = make(map[string]*holdBatch)
	}
	b, ok := hb.rows[id]
	if !ok {
		b = &holdBatch{}
		hb.rows[id] = b
	}
	return b
}

// write writes what is queued on row id (batch b) in one compare-and-set,
// answers each request, and hands the queue to the first request queued
// meanwhile, or ends the writing and forgets b. A request whose caller
// left has its answer dropped with it.
func (hb *holdBatches) write(b *holdBatch, store *runstore.Store, id string) {
	b.mu.Lock()
	batch := b.queue
	b.queue = nil
	b.mu.Unlock()
	if len(batch) > 0 {
		errs := make([]error, len(batch))
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		_, _, err := store.Mutate(ctx, id, func(r *model.Row) error {
			changed := false
			for i, q := range batch {
				errs[i] = q.fn(r) // r is as it was after an error
				switch {
				case errs[i] == nil:
					changed = true
				case errors.Is(errs[i], model.ErrNoChange):
					errs[i] = nil
				}
			}
			if !changed {
				return model.ErrNoChange
			}
			return nil
		})
		cancel()
		for i, q := range batch {
			if err != nil {
				q.done <- err
			} else {
				q.done <- errs[i]
			}
		}
	}
	b.mu.Lock()
	if len(b.queue) > 0 {
		next := b.queue[0]
		next.handed = true
		close(next.lead)
		b.mu.Unlock()
		return
	}
	b.writing = false
	b.mu.Unlock()
	// Idle: forget it, unless a request came meanwhile. One that took b
	// from the map before it is forgotten writes through b on its own: a
	// second queue for the row batches less, and the compare-and-set keeps
	// every write correct.
	hb.mu.Lock()
	defer hb.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.writing && len(b.queue) == 0 && hb.rows[id] == b {
		delete(hb.rows, id)
	}
}
