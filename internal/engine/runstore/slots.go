package runstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// slotGrace is how long a slot whose run has no row yet still counts: its
// dispatcher creates the row right after taking the slot, unless it died.
const slotGrace = time.Minute

// slotPrefix is the key prefix of the concurrency slots of runs whose
// parent is parent: slot.<parent>.<n>.
func slotPrefix(parent string) string { return "slot." + parent + "." }

// TakeSlot takes one of parent's n concurrency slots for run id, and
// reports false when all n are held by live runs. A slot is a key
// slot.<parent>.<i> in the active bucket holding the run id; taking a free
// one is a create, taking over one whose run is no longer starting or
// running is a compare-and-set, so concurrent dispatchers never exceed n.
// A run that already holds a slot keeps it.
func (s *Store) TakeSlot(ctx context.Context, parent string, n int, id string) (bool, error) {
	key := func(i int) string { return slotPrefix(parent) + strconv.Itoa(i) }
	for i := range n {
		_, err := s.active.Create(ctx, key(i), []byte(id))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return false, fmt.Errorf("kv: take a concurrency slot of %s: %w", parent, err)
		}
	}
	for i := range n {
		e, err := s.active.Get(ctx, key(i))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := s.active.Create(ctx, key(i), []byte(id)); err == nil {
				return true, nil
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("kv: read a concurrency slot of %s: %w", parent, err)
		}
		holder := string(e.Value())
		if holder == id {
			return true, nil
		}
		row, _, err := s.Get(ctx, holder)
		switch {
		case err == nil && (row.Status == events.StatusStarting || row.Status == events.StatusRunning):
			continue // still counts
		case errors.Is(err, ErrRunNotFound) && time.Since(e.Created()) < slotGrace:
			continue // its dispatcher is about to create the row
		case err != nil && !errors.Is(err, ErrRunNotFound):
			return false, fmt.Errorf("kv: check a concurrency slot of %s: %w", parent, err)
		}
		if _, err := s.active.Update(ctx, key(i), []byte(id), e.Revision()); err == nil {
			return true, nil
		}
	}
	return false, nil
}
