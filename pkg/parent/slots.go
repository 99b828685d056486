package parent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
)

// slotGrace is how long a slot whose run has no row yet still counts: its
// dispatcher creates the row right after taking the slot, unless it died.
const slotGrace = time.Minute

// acquireSlot takes one of the parent's maxConcurrent slots for run id. A
// slot is a key slot.<parent>.<n> in the active bucket holding the run id;
// taking a free one is a create, taking over one whose run is no longer
// starting or running is a compare-and-set, so concurrent dispatchers never
// exceed the cap.
func (c *Client) acquireSlot(ctx context.Context, parent string, maxConcurrent int, id string) error {
	bucket := c.store.ActiveBucket()
	key := func(i int) string { return kv.SlotPrefix(parent) + strconv.Itoa(i) }
	for i := range maxConcurrent {
		_, err := bucket.Create(ctx, key(i), []byte(id))
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("parent: take a concurrency slot of %s: %w", parent, err)
		}
	}
	for i := range maxConcurrent {
		e, err := bucket.Get(ctx, key(i))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := bucket.Create(ctx, key(i), []byte(id)); err == nil {
				return nil
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("parent: read a concurrency slot of %s: %w", parent, err)
		}
		holder := string(e.Value())
		if holder == id {
			return nil
		}
		row, _, err := c.store.Get(ctx, holder)
		switch {
		case err == nil && (row.Status == events.StatusStarting || row.Status == events.StatusRunning):
			continue // still counts
		case errors.Is(err, kv.ErrRunNotFound) && time.Since(e.Created()) < slotGrace:
			continue // its dispatcher is about to create the row
		case err != nil && !errors.Is(err, kv.ErrRunNotFound):
			return fmt.Errorf("parent: check a concurrency slot of %s: %w", parent, err)
		}
		if _, err := bucket.Update(ctx, key(i), []byte(id), e.Revision()); err == nil {
			return nil
		}
	}
	return fmt.Errorf("parent: dispatch under %s: %w (%d live children)", parent, ErrConcurrencyLimit, maxConcurrent)
}
