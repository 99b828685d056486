package parent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Steps returns the durable steps run id stored (worker.Run.Step, a child's
// step line), in the order they were stored, each name once (the first
// stored copy). It returns ErrRunNotFound for an unknown run.
func (c *Client) Steps(ctx context.Context, id string) ([]events.Step, error) {
	row, err := c.stored(ctx, id)
	if errors.Is(err, ErrRunNotFound) {
		return nil, fmt.Errorf("parent: steps of run %s: %w", id, ErrRunNotFound)
	}
	if err != nil {
		return nil, err
	}
	opts := events.ReplayOptions{
		StartSeq: row.FirstEventSeq, StartTime: row.CreatedAt.Add(-time.Minute),
		Kinds: []string{events.KindStep}, Follow: events.HistoryOnly,
	}
	var out []events.Step
	seen := make(map[string]bool)
	for ev, err := range wire.Replay(ctx, c.js, c.ns, id, opts) {
		if err != nil {
			return nil, fmt.Errorf("parent: steps of run %s: %w", id, err)
		}
		if st := ev.Step; st != nil && !seen[st.Name] {
			seen[st.Name] = true
			out = append(out, *st)
		}
	}
	return out, nil
}
