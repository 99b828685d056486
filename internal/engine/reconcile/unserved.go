package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
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
	ns, stream := r.ns, r.rt.DispatchStream()
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(ns.DispatchWildcard()))
	if err != nil {
		return 0, fmt.Errorf("reconcile: dispatch subjects: %w", err)
	}
	epoch := wire.StreamEpoch(info.Created)
	now := time.Now()
	marked := 0
	for subject, n := range info.State.Subjects {
		agentType := ns.AgentTypeFromDispatchSubject(subject)
		if n == 0 || events.ValidateToken("agent type", agentType) != nil {
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
			if wait := r.cfg.DispatchUnservedWait; wait > 0 && now.Sub(msg.Time) >= wait {
				if err := r.deadLetterUnservedDispatch(ctx, stream, agentType, epoch, msg, why, now.Sub(msg.Time)); err != nil {
					return marked, err
				}
			}
		}
	}
	return marked, nil
}

// unserved says why no worker takes agent type's dispatches ("" when one
// may), and how long a dispatch must have waited to be called unserved.
func (r *Reconciler) unserved(ctx context.Context, agentType string) (why string, minAge time.Duration, err error) {
	c, err := r.js.Consumer(ctx, r.ns.DispatchStream(), wire.AgentConsumer(agentType))
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

// dispatchOf decodes the dispatch msg and names its run as a worker would;
// ok is false for one a worker dead-letters.
func dispatchOf(epoch string, msg *jetstream.RawStreamMsg) (d events.Dispatch, ok bool) {
	d, err := events.DecodeDispatch(msg.Data)
	if err != nil {
		return d, false
	}
	if d.RunID == "" {
		d.RunID = msg.Header.Get(jetstream.MsgIDHeader)
		if events.ValidateID(d.RunID) != nil {
			d.RunID = wire.DerivedRunID(epoch, msg.Sequence)
		}
	}
	return d, d.Validate() == nil
}

// deadLetterUnservedDispatch gives up the dispatch msg that no worker took
// for DispatchUnservedWait. The run's "starting" row ends "error" (reason
// no-worker) first: a worker that claims it meanwhile wins the
// compare-and-set and nothing else happens; one that gets the dispatch
// later finds the run final. Then the dispatch is copied to
// jetrun.dlq.<agentType> with the reason (deduplicated by its stream
// sequence) and removed from the dispatch stream. Each step is idempotent,
// so a pass cut short by a fault is completed by the next one.
func (r *Reconciler) deadLetterUnservedDispatch(ctx context.Context, stream jetstream.Stream, agentType, epoch string,
	msg *jetstream.RawStreamMsg, why string, waited time.Duration) error {
	d, ok := dispatchOf(epoch, msg)
	if !ok {
		return nil
	}
	text := fmt.Sprintf("%s; its dispatch waited %s and was dead-lettered", why, waited.Round(time.Second))
	now := time.Now()
	row, _, err := r.store.Mutate(ctx, d.RunID, func(run *model.Row) error {
		if run.Status != events.StatusStarting || run.AgentType != agentType {
			return runstore.ErrNoChange
		}
		if now.Sub(run.WaitingSince()) < r.cfg.DispatchUnservedWait {
			// A dispatch from before the run was retried: the run itself
			// has not waited that long for a worker. The message stays
			// (a worker that comes takes the run with it, or drops it).
			return runstore.ErrNoChange
		}
		return model.Apply(run, model.Ended{Status: events.StatusError, Reason: events.ReasonNoWorker, Error: text}, now)
	})
	if errors.Is(err, runstore.ErrRunNotFound) {
		return nil // cleared; a worker drops its dispatch
	}
	if err != nil {
		return err
	}
	if row.Status != events.StatusError || row.Reason != events.ReasonNoWorker || row.AgentType != agentType {
		return nil // a worker took it, or it ended otherwise
	}
	r.announce(ctx, row)
	ns := r.ns
	dlq := &nats.Msg{Subject: ns.DLQSubject(agentType), Data: msg.Data, Header: nats.Header{}}
	for k, vs := range msg.Header {
		if !strings.HasPrefix(k, "Nats-") {
			dlq.Header[k] = vs
		}
	}
	if id := msg.Header.Get(jetstream.MsgIDHeader); id != "" {
		dlq.Header.Set(events.HeaderOriginalMsgID, wire.HeaderValue(id))
	}
	seq := strconv.FormatUint(msg.Sequence, 10)
	dlq.Header.Set(events.HeaderReason, wire.HeaderValue(row.Error))
	dlq.Header.Set(events.HeaderOriginalSubject, msg.Subject)
	dlq.Header.Set(events.HeaderOriginalSequence, seq)
	dlq.Header.Set(jetstream.MsgIDHeader, "dlq-"+ns.DispatchStream()+"-"+seq)
	if _, err := r.js.PublishMsg(ctx, dlq); err != nil {
		return fmt.Errorf("reconcile: dead-letter the dispatch of run %s: %w", row.ID, err)
	}
	if err := stream.DeleteMsg(ctx, msg.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("reconcile: remove the dead-lettered dispatch of run %s: %w", row.ID, err)
	}
	r.log.WarnContext(ctx, "dispatch dead-lettered: no worker took it", "run_id", row.ID, "agent_type", agentType,
		"waited", waited.Round(time.Second), "why", why)
	return nil
}

// markWaiting creates the row of the dispatch msg, "starting" with reason
// waiting-for-worker, or sets that reason on its "starting" row. It
// reports whether it wrote anything.
func (r *Reconciler) markWaiting(ctx context.Context, agentType, epoch string, msg *jetstream.RawStreamMsg, why string) (bool, error) {
	d, ok := dispatchOf(epoch, msg)
	if !ok {
		return false, nil // a worker dead-letters it
	}
	wire.TakeTrace(&d, msg.Header)
	row := model.NewRun(agentType, d, msg.Sequence, msg.Time)
	waiting := model.WaitingForWorker{Why: why}
	now := time.Now()
	if err := model.Apply(row, waiting, now); err != nil {
		return false, err
	}
	if _, err := r.store.Create(ctx, row); err == nil {
		r.log.InfoContext(ctx, "dispatch waiting for a worker", "run_id", row.ID, "agent_type", agentType, "why", why)
		return true, nil
	} else if !errors.Is(err, runstore.ErrRunExists) {
		return false, err
	}
	wrote := false
	_, _, err := r.store.Mutate(ctx, d.RunID, func(run *model.Row) error {
		wrote = false
		if run.AgentType != agentType {
			return runstore.ErrNoChange
		}
		if err := model.Apply(run, waiting, now); err != nil {
			return err // not starting, or marked so already
		}
		wrote = true
		return nil
	})
	if errors.Is(err, runstore.ErrRunNotFound) {
		return false, nil // cleared meanwhile
	}
	return wrote, err
}
