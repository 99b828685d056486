package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/obs"
)

// sweep is the state of one pass over the active index.
type sweep struct {
	r     *Reconciler
	now   time.Time
	watch *kv.ActiveWatch

	mu     sync.Mutex
	stats  Stats
	queues map[string]*queueState // per consumer name
}

// queueState says whether a durable consumer exists and has nothing queued
// or in flight: then a lost message is surely lost, not merely waiting.
type queueState struct {
	once   sync.Once
	exists bool
	idle   bool
}

func (s *sweep) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

func (s *sweep) queue(ctx context.Context, stream, consumer string) (exists, idle bool) {
	s.mu.Lock()
	q := s.queues[stream+"/"+consumer]
	if q == nil {
		q = &queueState{}
		s.queues[stream+"/"+consumer] = q
	}
	s.mu.Unlock()
	q.once.Do(func() {
		c, err := s.r.js.Consumer(ctx, stream, consumer)
		if err != nil {
			return
		}
		info, err := c.Info(ctx)
		if err != nil {
			return
		}
		q.exists = true
		q.idle = info.NumPending == 0 && info.NumAckPending == 0
	})
	return q.exists, q.idle
}

// run reconciles one run of the active index.
func (s *sweep) run(ctx context.Context, ir kv.IndexedRun) error {
	r := s.r
	row, _, err := r.store.Get(ctx, ir.ID)
	if errors.Is(err, kv.ErrRunNotFound) {
		if s.now.Sub(ir.CreatedAt) > orphanGrace {
			s.count(func(st *Stats) { st.Unindexed++ })
			s.watch.Forget(ir.ID)
			return r.store.UnindexID(ctx, ir.ID)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if row.Settled() {
		s.count(func(st *Stats) { st.Unindexed++ })
		s.watch.Forget(ir.ID)
		return r.store.Unindex(ctx, row)
	}
	if err := s.republishFinishes(ctx, row); err != nil {
		return err
	}
	if row.Status.Final() {
		return nil // its finishes are on their way
	}
	if done, err := s.cascade(ctx, row); done || err != nil {
		return err
	}
	if done, err := s.enforceBudgets(ctx, row); done || err != nil {
		return err
	}
	return s.recover(ctx, row)
}

// republishFinishes publishes again the finishes still owed whose message
// is not queued: the transition's own publish was lost (a crash between the
// row write and the publish).
func (s *sweep) republishFinishes(ctx context.Context, row *kv.Run) error {
	r := s.r
	for _, st := range row.PendingFinishes() {
		fs := row.Finishes[st]
		if s.now.Sub(fs.DueAt) < r.cfg.Interval || fs.ClaimedUntil.After(s.now) {
			continue // the fast path is on it
		}
		exists, idle := s.queue(ctx, r.cfg.Namespace.FinishStream(), events.FinishConsumer(row.Detached.OnFinish))
		if !exists || !idle || !r.paceOK(row.ID+"/finish/"+string(st), s.now, r.republishEvery()) {
			continue
		}
		if err := kv.PublishFinish(ctx, r.js, r.cfg.Namespace, row, st); err != nil {
			return err
		}
		s.count(func(st *Stats) { st.Republished++ })
		r.obs.Report(ctx, obs.RunRecovered, row.ID, "action", "finish republished", "status", st)
	}
	return nil
}

// cascade cancels a live run whose parent was cancelled: it completes a
// cascade that a crash cut short.
func (s *sweep) cascade(ctx context.Context, row *kv.Run) (bool, error) {
	if row.Parent == "" || row.CancelRequested {
		return false, nil
	}
	p, _, err := s.r.store.Get(ctx, row.Parent)
	if errors.Is(err, kv.ErrRunNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if p.Status != events.StatusAborted && !p.CancelRequested {
		return false, nil
	}
	reason := "parent run " + p.ID + " was cancelled"
	aborted := false
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *kv.Run) (err error) {
		aborted, err = r.RequestCancel(reason, time.Now())
		return err
	})
	if err != nil {
		return true, err
	}
	if aborted {
		s.r.announce(ctx, next)
	}
	s.count(func(st *Stats) { st.Cancelled++ })
	s.r.obs.Report(ctx, obs.RunCascadeCancel, row.ID, "parent", p.ID)
	return true, nil
}

// enforceBudgets gives up a detached run past its absolute budget, or silent
// for longer than its no-progress budget (armed by its first signal; a run
// waiting for a signal is not silent).
func (s *sweep) enforceBudgets(ctx context.Context, row *kv.Run) (bool, error) {
	if row.Detached == nil || (row.Status != events.StatusRunning && row.Status != events.StatusStarting) {
		return false, nil
	}
	reason, text := s.overBudget(row, s.now)
	if reason == "" {
		return false, nil
	}
	var gaveUp bool
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *kv.Run) error {
		now := time.Now()
		if r.Status != events.StatusRunning && r.Status != events.StatusStarting {
			return kv.ErrNoChange
		}
		if again, _ := s.overBudget(r, now); again == "" {
			return kv.ErrNoChange // it signalled meanwhile
		}
		r.Interrupt(reason, text, r.LeaseHeld(now), now)
		r.CancelRequested, r.CancelReason = true, reason // tear the child down
		gaveUp = true
		return nil
	})
	if err != nil || !gaveUp {
		return gaveUp, err
	}
	s.r.announce(ctx, next)
	s.count(func(st *Stats) { st.GivenUp++ })
	s.r.obs.Report(ctx, obs.BudgetExceeded, row.ID, "reason", reason, "child_still_running", next.ChildStillRunning)
	return true, nil
}

// overBudget returns the give-up reason and text, or "" if r is within its
// budgets at now.
func (s *sweep) overBudget(r *kv.Run, now time.Time) (reason, text string) {
	cfg := s.r.cfg
	since := r.StartedAt
	if since.IsZero() {
		since = r.CreatedAt
	}
	budget := cfg.MaxBudget
	if ms := r.Detached.MaxBudgetMs; ms > 0 {
		budget = time.Duration(ms) * time.Millisecond
	}
	if now.Sub(since) > budget {
		return events.ReasonBudgetExceeded, fmt.Sprintf("ran past its absolute budget of %s", budget)
	}
	silence := cfg.NoProgressBudget
	if ms := r.Detached.NoProgressBudgetMs; ms > 0 {
		silence = time.Duration(ms) * time.Millisecond
	}
	if !r.LastSignalAt.IsZero() && r.WaitingFor == "" && now.Sub(r.LastSignalAt) > silence {
		return events.ReasonNoProgress, fmt.Sprintf("made no progress for %s (its no-progress budget)", silence)
	}
	return "", ""
}

// recover re-publishes the dispatch of a run nothing will wake: "starting"
// past its grace, or running with a long-expired lease, while its agent
// type's queue is empty (so the original dispatch is gone, not waiting). A
// run re-dispatched MaxRedispatches times ends "error" (reason no-worker).
func (s *sweep) recover(ctx context.Context, row *kv.Run) error {
	r := s.r
	var why string
	switch {
	case row.Status == events.StatusStarting && s.now.Sub(row.CreatedAt) > r.cfg.StartingGrace:
		why = "dispatch lost before a worker took it"
	case (row.Status == events.StatusRunning || row.Status == events.StatusInterrupted && row.Reason == events.ReasonLeaseLost) &&
		!row.LeaseHeld(s.now) && s.now.Sub(row.LeaseUntil) > r.cfg.LeaseGrace:
		why = "lease expired and no worker took the run over"
	default:
		return nil
	}
	exists, idle := s.queue(ctx, r.cfg.Namespace.DispatchStream(), events.AgentConsumer(row.AgentType))
	if !exists || !idle || !r.paceOK(row.ID+"/dispatch", s.now, max(r.cfg.StartingGrace, r.cfg.LeaseGrace)) {
		return nil
	}
	if row.Redispatches >= r.cfg.MaxRedispatches {
		text := fmt.Sprintf("no worker took the run over after %d re-dispatches", row.Redispatches)
		next, _, err := r.store.Mutate(ctx, row.ID, func(run *kv.Run) error {
			if run.Status.Final() || run.LeaseHeld(time.Now()) {
				return kv.ErrNoChange
			}
			run.End(events.StatusError, events.ReasonNoWorker, text, time.Now())
			return nil
		})
		if err != nil {
			return err
		}
		if next.Status == events.StatusError && next.Reason == events.ReasonNoWorker {
			r.announce(ctx, next)
			s.count(func(st *Stats) { st.Failed++ })
			r.obs.Report(ctx, obs.RunRecovered, row.ID, "action", "gave up", "reason", text)
		}
		return nil
	}
	next, _, err := r.store.Mutate(ctx, row.ID, func(run *kv.Run) error {
		if run.Status.Final() || run.LeaseHeld(time.Now()) || run.Redispatches != row.Redispatches {
			return kv.ErrNoChange
		}
		run.Redispatches++
		return nil
	})
	if err != nil || next.Redispatches == row.Redispatches {
		return err
	}
	msgID := row.ID + ".redispatch." + strconv.Itoa(next.Redispatches)
	if err := r.publishDispatch(ctx, next, msgID); err != nil {
		return err
	}
	s.count(func(st *Stats) { st.Recovered++ })
	r.obs.Report(ctx, obs.RunRecovered, row.ID, "action", "re-dispatched", "why", why, "redispatches", next.Redispatches)
	return nil
}

// publishDispatch publishes the dispatch of row with msgID.
func (r *Reconciler) publishDispatch(ctx context.Context, row *kv.Run, msgID string) error {
	data, err := json.Marshal(row.Dispatch())
	if err != nil {
		return err
	}
	_, err = r.js.Publish(ctx, r.cfg.Namespace.DispatchSubject(row.AgentType), data, jetstream.WithMsgID(msgID))
	if err != nil {
		return fmt.Errorf("reconcile: re-dispatch run %s: %w", row.ID, err)
	}
	return nil
}

// announce publishes a transition the reconciler made; the next sweep
// republishes an owed finish if this fails.
func (r *Reconciler) announce(ctx context.Context, row *kv.Run) {
	if err := kv.PublishTransition(ctx, r.js, r.cfg.Namespace, row, ""); err != nil {
		r.log.Warn("announce transition", "run_id", row.ID, "status", row.Status, "err", err)
	}
}
