package parent

import (
	"context"
	"fmt"
)

// acquireSlot takes one of the parent's maxConcurrent slots for run id
// (kv.Store.TakeSlot), or fails with ErrConcurrencyLimit.
func (c *Client) acquireSlot(ctx context.Context, parent string, maxConcurrent int, id string) error {
	ok, err := c.store.TakeSlot(ctx, parent, maxConcurrent, id)
	if err != nil {
		return fmt.Errorf("parent: dispatch under %s: %w", parent, err)
	}
	if !ok {
		return fmt.Errorf("parent: dispatch under %s: %w (%d live children)", parent, ErrConcurrencyLimit, maxConcurrent)
	}
	return nil
}
