package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// Runs nothing will wake (model.Row.recovery decides which): "starting"
// past its grace, or running with a long-expired lease and no live holder,
// whose dispatch message (row.dispatchSeq) is no longer in the dispatch
// stream. A "starting" run whose dispatch was never located gets it
// published under its run id; a lost one is published again, up to
// MaxRedispatches times; then the run ends "error" (reason
// dispatch-lost). A given-up run whose worker died before its child
// stopped is released.

// dispatch publishes the dispatch of a run nothing will wake whose
// dispatch was never located (model.Dispatch: the parent writes the row,
// then publishes; a worker's claim records where it is) under the message
// id its writer used: a copy that did land within the dedup window is not
// stored twice, and the answer says where it is.
func (s *sweep) dispatch(ctx context.Context, row *model.Row, a model.Dispatch) error {
	r := s.r
	if !r.paceOK(row.ID+"/dispatch", s.now, max(r.cfg.StartingGrace, r.cfg.LeaseGrace)) {
		return nil
	}
	seq, dup, err := r.publishDispatch(ctx, row, row.DispatchMsgID())
	if err != nil {
		return err
	}
	if _, _, err := r.store.Mutate(ctx, row.ID, model.Mutation(time.Now(), model.DispatchRecorded{Seq: seq})); err != nil {
		return err
	}
	if !dup {
		s.count(func(st *Stats) { st.Recovered++ })
		obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "dispatched", "why", a.Why)
	}
	return nil
}

// lost reports whether the dispatch of row at stream sequence seq is no
// longer in the dispatch stream (a dispatch still there, waiting for a
// free worker or for redelivery, is left alone, however long the fleet is
// busy), paced per run.
func (s *sweep) lost(ctx context.Context, row *model.Row, seq uint64) (bool, error) {
	r := s.r
	if !r.paceOK(row.ID+"/dispatch", s.now, max(r.cfg.StartingGrace, r.cfg.LeaseGrace)) {
		return false, nil
	}
	queued, err := r.rt.DispatchQueued(ctx, seq)
	if err != nil {
		return false, fmt.Errorf("run %s: %w", row.ID, err)
	}
	return !queued, nil // still queued or held: it will wake a worker
}

// redispatch publishes again the lost dispatch of a run nothing will wake
// (model.Redispatch), unless it is still queued.
func (s *sweep) redispatch(ctx context.Context, row *model.Row, a model.Redispatch) error {
	r := s.r
	if lost, err := s.lost(ctx, row, a.Lost); !lost || err != nil {
		return err
	}
	seq, _, err := r.publishDispatch(ctx, row, row.RedispatchMsgID(a.N))
	if err != nil {
		return err
	}
	// Unless claimed meanwhile: the extra dispatch is dropped by its worker.
	_, _, err = r.store.Mutate(ctx, row.ID, model.Mutation(time.Now(), model.Redispatched{Lost: a.Lost, Seq: seq}))
	if err != nil {
		return err
	}
	s.count(func(st *Stats) { st.Recovered++ })
	obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "re-dispatched", "why", a.Why, "redispatches", a.N)
	return nil
}

// failDispatchLost ends "error" (reason dispatch-lost) a run whose
// dispatch was lost MaxRedispatches times (model.FailDispatchLost), unless
// it is still queued, or the row moved on.
func (s *sweep) failDispatchLost(ctx context.Context, row *model.Row, a model.FailDispatchLost) error {
	r := s.r
	if lost, err := s.lost(ctx, row, a.Lost); !lost || err != nil {
		return err
	}
	now := time.Now()
	next, _, err := r.store.Mutate(ctx, row.ID, func(run *model.Row) error {
		if run.Status.Final() || r.holderAlive(ctx, run) || run.DispatchSeq != a.Lost {
			return runstore.ErrNoChange
		}
		return model.Apply(run, model.Ended{Status: events.StatusError, Reason: events.ReasonDispatchLost, Error: a.Text}, now)
	})
	if err != nil {
		return err
	}
	if next.Status == events.StatusError && next.Reason == events.ReasonDispatchLost {
		r.announce(ctx, next)
		s.count(func(st *Stats) { st.Failed++ })
		obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "gave up", "reason", a.Text)
	}
	return nil
}

// publishDispatch publishes the dispatch of row with msgID (one try) and
// returns its stream sequence, and whether the dedup window found it
// already stored.
func (r *Reconciler) publishDispatch(ctx context.Context, row *model.Row, msgID string) (uint64, bool, error) {
	p, err := r.rt.PublishDispatch(ctx, row.AgentType, row.Dispatch(), engine.DispatchOptions{MsgID: msgID})
	if err != nil {
		return 0, false, fmt.Errorf("reconcile: re-dispatch run %s: %w", row.ID, err)
	}
	return p.Seq, p.Duplicate, nil
}

// releaseLostChild settles a given-up run whose worker died before it could
// confirm the child stopped (model.ReleaseLostChild): its lease expired
// long ago, so no child runs.
func (s *sweep) releaseLostChild(ctx context.Context, row *model.Row) error {
	now := time.Now()
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *model.Row) error {
		if !r.ChildStillRunning || s.r.holderAlive(ctx, r) {
			return runstore.ErrNoChange
		}
		return model.Apply(r, model.ChildStopped{}, now) // or ErrNoChange: not interrupted
	})
	if err == nil {
		s.r.countLostSteps(ctx, next) // its worker died before its last row write
	}
	return err
}

// countLostSteps counts on a run the reconciler ended or gave up what the
// steps of its lost attempt spent (engine.Runtime.CountLostSteps) and
// returns its row as it is now.
func (r *Reconciler) countLostSteps(ctx context.Context, row *model.Row) *model.Row {
	next, err := r.rt.CountLostSteps(ctx, row)
	if err != nil {
		r.fault(ctx, "count the stored steps of a run ended without its worker", err, "run_id", row.ID)
	}
	return next
}
