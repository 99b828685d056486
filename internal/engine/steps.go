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

// StoredStepUsage adds up the usage stored with the steps of run id (its
// step events, read one direct get at a time from the stream sequence
// from, its first event's, or the stream's start for 0).
func (rt *Runtime) StoredStepUsage(ctx context.Context, id string, from uint64) (events.Usage, error) {
	var sum events.Usage
	subject := rt.EventSubject(id, events.KindStep)
	stream := rt.EventsStreamFor(id)
	for seq := max(from, 1); ; {
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return sum, nil
		}
		if err != nil {
			return events.Usage{}, fmt.Errorf("jetrun: read the steps of run %s: %w", id, err)
		}
		seq = m.Sequence + 1
		var st events.Step
		if err := json.Unmarshal(m.Data, &st); err != nil || st.Usage == nil {
			continue // a malformed step counts nothing, as for a takeover
		}
		sum = model.PlusUsage(sum, *st.Usage)
	}
}

// CountLostSteps counts on the row of r, a run that no attempt executes
// any more, what its stored steps spent beyond what the row counts of them
// (model.StepsCounted). An attempt counts its steps in its own row
// writes, and one that takes a run over counts what earlier attempts
// stored; an attempt lost before its row write counted its last steps
// leaves them to whoever ends or gives up its run without another attempt
// (a cancel, a stop for a budget, a give-up, the reconciler, a worker that
// finds the attempts used up), and to the lost attempt itself if it lives
// on. It reads the run's steps only for a run that had an attempt and is
// final or interrupted with no worker holding it, and writes only when
// they spent more than the row counts. It returns the row as it is after
// (r when nothing changed, or on an error).
func (rt *Runtime) CountLostSteps(ctx context.Context, r *model.Row) (*model.Row, error) {
	if r.Attempt == 0 || r.Worker != "" || !(r.Status.Final() || r.Status == events.StatusInterrupted) {
		return r, nil
	}
	stored, err := rt.StoredStepUsage(ctx, r.ID, r.FirstEventSeq)
	if err != nil {
		return r, err
	}
	if model.IsZeroUsage(model.MinusUsage(stored, usageOf(r.StepUsage))) {
		return r, nil
	}
	// Unless an attempt holds it again: it counts them.
	next, _, err := rt.store.Mutate(ctx, r.ID, model.Mutation(time.Now(), model.StepsCounted{Stored: stored}))
	if errors.Is(err, runstore.ErrRunNotFound) {
		return r, nil // cleared
	}
	if err != nil {
		return r, fmt.Errorf("jetrun: count the stored steps of run %s: %w", r.ID, err)
	}
	return next, nil
}

func usageOf(u *events.Usage) events.Usage {
	if u == nil {
		return events.Usage{}
	}
	return *u
}
