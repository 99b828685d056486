package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
)

// Retain clears the final, settled runs that finished longer ago than the
// retention: their events, rows and index entries. With no retention
// (Config.Retention zero or negative) it clears nothing. It reads the whole
// runs bucket, so it runs on its own slow timer, not in the sweep.
func (r *Reconciler) Retain(ctx context.Context) (int, error) {
	if r.cfg.Retention <= 0 {
		return 0, nil
	}
	now := time.Now()
	rows, err := r.store.List(ctx, func(run *model.Row) bool { return run.Expired(now, r.cfg.Retention) })
	if err != nil {
		return 0, fmt.Errorf("reconcile: retention: %w", err)
	}
	n := 0
	for _, run := range rows {
		if err := r.rt.Erase(ctx, run); err != nil {
			return n, fmt.Errorf("reconcile: retention: %w", err)
		}
		n++
	}
	r.TestSignals.Retained.Signal(n)
	return n, nil
}
