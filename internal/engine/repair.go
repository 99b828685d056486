package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// RepairFinal restores the row of run id from the run's last status event
// when that event holds a final status (completed, error, aborted) and the
// row does not: jetrun never leaves a final status, so such a row was
// rewritten by someone who may write rows without the compare-and-set
// (any credential that may write the runs bucket, see docs/operations.md,
// "What each role can do"). The status, reason, error, attempt and
// finishedAt come back from the event, the lease is released; fields the
// event does not carry (output, summary) stay as the row has them. It
// returns the event and true when it repaired the row; false when there
// was nothing to repair. It is idempotent and safe to run concurrently.
func (rt *Runtime) RepairFinal(ctx context.Context, id string) (*events.StatusEvent, bool, error) {
	if err := events.ValidateID(id); err != nil {
		return nil, false, fmt.Errorf("jetrun: repair run: %w", err)
	}
	m, err := rt.EventsStreamFor(id).GetLastMsgForSubject(ctx, rt.cfg.Namespace.RunSubject(id, events.KindStatus))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("jetrun: repair run %s: read its last status event: %w", id, err)
	}
	var ev events.StatusEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.RunID != id || !ev.Status.Final() {
		return nil, false, nil
	}
	repaired := false
	_, _, err = rt.store.Mutate(ctx, id, func(r *jetruntype.Run) error {
		repaired = false
		if r.Status.Final() {
			return runstore.ErrNoChange
		}
		r.Status, r.Reason, r.Error = ev.Status, ev.Reason, ev.Error
		r.Retryable, r.ChildStillRunning = false, false
		r.Worker, r.WorkerEpoch, r.LeaseUntil = "", "", time.Time{}
		r.Attempt, r.FinishedAt = ev.Attempt, ev.At
		repaired = true
		return nil
	})
	if errors.Is(err, runstore.ErrRunNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("jetrun: repair run %s: %w", id, err)
	}
	if !repaired {
		return nil, false, nil
	}
	return &ev, true, nil
}
