package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// RepairFinal restores the row of run id to the run's real ending when
// the row says otherwise: the first status event on the run's status
// subject that holds a final status (completed, error, aborted) for the
// run. jetrun never leaves a final status nor changes a final row's
// status, reason, error or attempt, so a row that left its final status or
// holds another ending was rewritten by someone who may write rows without
// the compare-and-set (any credential that may write the runs bucket, see
// docs/operations.md, "What each role can do"); the first final event is
// the real ending, whatever was published on the subject after it (a junk
// event, a forged one). The status, reason, error, attempt and finishedAt
// come back from the event, the lease is released; fields the event does
// not carry (output, summary) stay as the row has them. It returns the
// event and true when it repaired the row; false when there was nothing
// to repair, and ErrNoFinalEvent when the run has no final status event
// (yet: a writer stores the row before the event). It is idempotent and
// safe to run concurrently.
func (rt *Runtime) RepairFinal(ctx context.Context, id string) (*events.StatusEvent, bool, error) {
	if err := events.ValidateID(id); err != nil {
		return nil, false, fmt.Errorf("jetrun: repair run: %w", err)
	}
	ev, err := rt.firstFinal(ctx, id)
	if err != nil {
		return nil, false, err
	}
	if ev == nil {
		return nil, false, fmt.Errorf("jetrun: repair run %s: %w", id, ErrNoFinalEvent)
	}
	repaired := false
	now := time.Now()
	_, _, err = rt.store.RewriteFinal(ctx, id, func(r *model.Row) error {
		repaired = false
		if err := model.Apply(r, model.FinalRepaired{Event: *ev}, now); err != nil {
			return err // runstore.ErrNoChange: the row agrees with the event
		}
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
	return ev, true, nil
}

// ErrNoFinalEvent is returned by RepairFinal for a run with no status
// event that holds a final status.
var ErrNoFinalEvent = errors.New("the run has no final status event")

// maxStatusEvents bounds the status events firstFinal reads.
const maxStatusEvents = 1000

// firstFinal returns the first status event of run id that holds a final
// status, skipping whatever else is on its status subject (live statuses,
// another run's id, junk); nil if there is none.
func (rt *Runtime) firstFinal(ctx context.Context, id string) (*events.StatusEvent, error) {
	stream, subject := rt.EventsStreamFor(id), rt.cfg.Namespace.RunSubject(id, events.KindStatus)
	seq := uint64(1)
	for range maxStatusEvents {
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("jetrun: repair run %s: read its status events: %w", id, err)
		}
		var ev events.StatusEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.RunID == id && ev.Status.Final() {
			return &ev, nil
		}
		seq = m.Sequence + 1
	}
	return nil, nil
}
