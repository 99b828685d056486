package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/kv"
)

// unservedPerType bounds the dispatches of one agent type looked at per
// pass: a pass marks the oldest; the next pass goes on.
const unservedPerType = 100

// minUnservedEvery is the least time between two passes of markUnserved;
// a pass follows every sweep otherwise.
const minUnservedEvery = 2 * time.Second

// markUnserved makes dispatches that no worker takes visible: for every
// agent type with dispatches queued in the dispatch stream and either no
// worker consumer (no worker serving it was ever started) or a consumer
// that nobody pulls from (no pull request waiting, nothing being worked
// on) while a dispatch has waited StartingGrace, each such dispatch gets a
// row — "starting" with reason waiting-for-worker — or its "starting" row
// gets that reason. A worker that comes later claims the row as usual and
// clears the reason. It costs one stream-info request (subjects with
// messages) and one consumer-info request per agent type with queued
// dispatches, plus the reads and writes of the dispatches it marks. It
// returns how many rows it created or marked.
func (r *Reconciler) markUnserved(ctx context.Context) (int, error) {
	stream, err := r.dispatchStream(ctx)
	if err != nil {
		return 0, err
	}
	ns := r.cfg.Namespace
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(ns.DispatchWildcard()))
	if err != nil {
		return 0, fmt.Errorf("reconcile: dispatch subjects: %w", err)
	}
	epoch := events.StreamEpoch(info.Created)
	now := time.Now()
	marked := 0
	for subject, n := range info.State.Subjects {
		agentType := ns.AgentTypeFromDispatchSubject(subject)
		if n == 0 || events.ValidateAgentType(agentType) != nil {
			continue // malformed subjects are dead-lettered by workers
		}
		why, minAge, err := r.unserved(ctx, agentType)
		if err != nil {
			return marked, err
		}
		if why == "" {
			continue
		}
		for seq, i := uint64(1), 0; i < unservedPerType; i++ {
			msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return marked, fmt.Errorf("reconcile: read dispatch on %s: %w", subject, err)
			}
			seq = msg.Sequence + 1
			if now.Sub(msg.Time) < minAge {
				break // later ones are younger still
			}
			ok, err := r.markWaiting(ctx, agentType, epoch, msg, why)
			if err != nil {
				return marked, err
			}
			if ok {
				marked++
			}
		}
	}
	return marked, nil
}

// unserved says why no worker takes agent type's dispatches ("" when one
// may), and how long a dispatch must have waited to be called unserved.
func (r *Reconciler) unserved(ctx context.Context, agentType string) (why string, minAge time.Duration, err error) {
	c, err := r.js.Consumer(ctx, r.cfg.Namespace.DispatchStream(), events.AgentConsumer(agentType))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Sprintf("no worker serves agent type %s", agentType), 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("reconcile: consumer of agent type %s: %w", agentType, err)
	}
	ci := c.CachedInfo()
	if ci.NumWaiting == 0 && ci.NumAckPending == 0 {
		return fmt.Sprintf("no worker of agent type %s is running", agentType), r.cfg.StartingGrace, nil
	}
	return "", 0, nil
}

// markWaiting creates the row of the dispatch msg, "starting" with reason
// waiting-for-worker, or sets that reason on its "starting" row. It
// reports whether it wrote anything.
func (r *Reconciler) markWaiting(ctx context.Context, agentType, epoch string, msg *jetstream.RawStreamMsg, why string) (bool, error) {
	d, err := events.DecodeDispatch(msg.Data)
	if err != nil {
		return false, nil // a worker dead-letters it
	}
	if d.RunID == "" {
		d.RunID = msg.Header.Get(jetstream.MsgIDHeader)
		if events.ValidateID(d.RunID) != nil {
			d.RunID = events.DerivedRunID(epoch, msg.Sequence)
		}
	}
	if d.Validate() != nil {
		return false, nil
	}
	d.TakeTrace(msg.Header)
	row := jetruntype.NewRun(agentType, d, msg.Sequence, msg.Time)
	row.Reason, row.Error = events.ReasonWaitingForWorker, why
	if _, err := r.store.Create(ctx, row); err == nil {
		r.log.InfoContext(ctx, "dispatch waiting for a worker", "run_id", row.ID, "agent_type", agentType, "why", why)
		return true, nil
	} else if !errors.Is(err, kv.ErrRunExists) {
		return false, err
	}
	wrote := false
	_, _, err = r.store.Mutate(ctx, d.RunID, func(run *jetruntype.Run) error {
		if run.Status != events.StatusStarting || run.AgentType != agentType ||
			(run.Reason == events.ReasonWaitingForWorker && run.Error == why) {
			return kv.ErrNoChange
		}
		run.Reason, run.Error = events.ReasonWaitingForWorker, why
		wrote = true
		return nil
	})
	if errors.Is(err, kv.ErrRunNotFound) {
		return false, nil // cleared meanwhile
	}
	return wrote, err
}
