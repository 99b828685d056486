package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/subagent"
	"github.com/jetrun/jetrun/pkg/events"
)

// SessionTurn is an earlier turn of a run's session (Run.History): the
// run's id, status, input, output (or error) and stored steps.
type SessionTurn = subagent.Turn

// History returns the earlier turns of the run's session, oldest first:
// the runs of this agent type dispatched under the same session key
// (parent.Request.Session, the dispatch's "session") whose handlers read
// the history before this one first did, with their input, output and
// steps. The first call records the run as the session's next turn, so
// every attempt of it, on any worker, sees the same history. A run
// without a session has none (nil).
func (r *Run) History(ctx context.Context) ([]SessionTurn, error) {
	key := r.row.Session
	if key == "" {
		return nil, nil
	}
	e, ok := r.b.(*execution)
	if !ok {
		return nil, errors.New("worker: history: sessions need a worker")
	}
	if err := subagent.CheckSession(key); err != nil {
		return nil, fmt.Errorf("worker: run %s: history: %w", r.ID(), err)
	}
	w := e.w
	sid := subagent.SessionID(r.AgentType(), key)
	subject, stream := w.ns.RunSubject(sid, subagent.KindTurn), w.rt.EventsStreamFor(sid)
	ids, joined, err := subagent.TurnsBefore(ctx, stream, subject, r.ID())
	if err == nil && !joined {
		ev := subagent.TurnEvent{RunID: r.ID(), AgentType: r.AgentType(), Session: key, At: time.Now()}
		if err = subagent.JoinSession(ctx, w.js, subject, sid, ev); err == nil {
			ids, _, err = subagent.TurnsBefore(ctx, stream, subject, r.ID())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("worker: run %s: history: %w", r.ID(), err)
	}
	turns := make([]SessionTurn, 0, len(ids))
	for _, id := range ids {
		row, _, err := w.store.Get(ctx, id)
		if errors.Is(err, runstore.ErrRunNotFound) {
			continue // cleared
		}
		if err != nil {
			return nil, fmt.Errorf("worker: run %s: history: read turn %s: %w", r.ID(), id, err)
		}
		steps, err := subagent.ReadSteps(ctx, w.rt.EventsStreamFor(id), w.ns.RunSubject(id, events.KindStep), row.FirstEventSeq)
		if err != nil {
			return nil, fmt.Errorf("worker: run %s: history: %w", r.ID(), err)
		}
		turns = append(turns, SessionTurn{RunID: id, Status: row.Status, Input: row.Input, Output: row.Output,
			Summary: row.Summary, Error: row.Error, Steps: steps})
	}
	return turns, nil
}
