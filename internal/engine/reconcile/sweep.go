package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// sweep is the state of one pass over the active index.
type sweep struct {
	r     *Reconciler
	now   time.Time
	watch *runstore.ActiveWatch

	mu      sync.Mutex
	stats   Stats
	parents map[string]*jetruntype.Run   // parent rows read by this sweep (nil: gone)
	served  map[string]bool              // finish handlers a deliverer follows, as seen by this sweep
	copies  map[string]map[string]uint64 // per handler, Nats-Msg-Id → sequence of the finishes waiting
	keys    map[string]bool              // concurrency keys this sweep advanced (keys.go)
	held    map[string][]*jetruntype.Run // per live worker, the running runs it holds (holders.go)
}

func (s *sweep) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// run reconciles one run of the active index.
func (s *sweep) run(ctx context.Context, ir runstore.IndexedRun) error {
	r := s.r
	row, _, err := r.store.Get(ctx, ir.ID)
	if errors.Is(err, runstore.ErrRunNotFound) {
		if s.now.Sub(ir.CreatedAt) > orphanGrace {
			s.count(func(st *Stats) { st.Unindexed++ })
			s.watch.Forget(ir.ID)
			return r.store.Index().UnindexID(ctx, ir.ID)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if model.Of(row).Settled() {
		s.count(func(st *Stats) { st.Unindexed++ })
		s.watch.Forget(ir.ID)
		return r.store.Index().Unindex(ctx, row)
	}
	if err := s.republish(ctx, row); err != nil {
		return err
	}
	if row.Status.Final() {
		return nil // its finishes are on their way
	}
	s.renotifyCancel(ctx, row)
	if done, err := s.stoppedTree(ctx, row); done || err != nil {
		return err
	}
	if done, err := s.cascade(ctx, row); done || err != nil {
		return err
	}
	if row.Status == events.StatusQueued {
		return s.advanceKey(ctx, row)
	}
	if done, err := s.enforceBudgets(ctx, row); done || err != nil {
		return err
	}
	if done, err := s.releaseLostChild(ctx, row); done || err != nil {
		return err
	}
	s.noteHeld(ctx, row)
	return s.recover(ctx, row)
}

// renotifyCancel publishes again, paced, the cancel event of a run whose
// cancel is recorded and whose worker still runs it: the event a cancel's
// writer published may have been lost, and the row is the record.
func (s *sweep) renotifyCancel(ctx context.Context, row *jetruntype.Run) {
	if !row.CancelRequested || !row.Live() || row.Worker == "" {
		return
	}
	if s.r.paceOK(row.ID+"/cancel", s.now, max(s.r.cfg.Interval, 5*time.Second)) {
		s.r.notifyCancel(ctx, row)
	}
}

// countLostSteps counts on a run the reconciler ended or gave up what the
// steps of its lost attempt spent (engine.Runtime.CountLostSteps) and
// returns its row as it is now.
func (r *Reconciler) countLostSteps(ctx context.Context, row *jetruntype.Run) *jetruntype.Run {
	next, err := r.rt.CountLostSteps(ctx, row)
	if err != nil {
		r.fault(ctx, "count the stored steps of a run ended without its worker", err, "run_id", row.ID)
	}
	return next
}

// releaseLostChild settles a given-up run whose worker died before it could
// confirm the child stopped: its lease expired long ago, so no child runs.
func (s *sweep) releaseLostChild(ctx context.Context, row *jetruntype.Run) (bool, error) {
	if row.Status != events.StatusInterrupted || !row.ChildStillRunning || s.r.holderAlive(ctx, row) ||
		s.now.Sub(row.LeaseUntil) <= s.r.cfg.LeaseGrace {
		return false, nil
	}
	now := time.Now()
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *jetruntype.Run) error {
		if !r.ChildStillRunning || s.r.holderAlive(ctx, r) {
			return runstore.ErrNoChange
		}
		return model.Apply(model.Of(r), model.ChildStopped{}, now) // or ErrNoChange: not interrupted
	})
	if err == nil {
		s.r.countLostSteps(ctx, next) // its worker died before its last row write
	}
	return true, err
}

// republish publishes again the finishes and milestone notices a run's
// ledger still owes with no delivery under way, in case the transition's
// own publish was lost (a crash between the row write and the publish). A
// copy that finds its delivery done, or under way, is dropped by the
// deliverer.
//
// One copy per slot waits in the finish stream, however long: the stream's
// answer to a republish names the copy it holds (within the dedup window,
// the original), the ledger records its sequence, and no copy is published
// while that one is still in the stream (a work queue: it leaves when a
// deliverer is done with it, or at the stream's max age). Republishes are
// paced to once per dedup window.
//
// A finish no deliverer has taken is checked against its handler: see
// unserved. A finish whose copy the ledger does not know is looked for
// first, past the dedup window (findCopy).
func (s *sweep) republish(ctx context.Context, row *jetruntype.Run) error {
	r := s.r
	for _, o := range model.Of(row).Owed() {
		slot, finish := o.Slot, o.Milestone == ""
		if s.now.Sub(slot.DueAt) < r.cfg.Interval || slot.ClaimedUntil.After(s.now) {
			continue // the fast path is on it
		}
		if finish && slot.Attempts == 0 {
			if gone, err := s.unserved(ctx, row, o.Status); gone || err != nil {
				if err != nil {
					return err
				}
				continue
			}
		}
		pace := row.ID + "/notice/" + o.Milestone
		if finish {
			pace = row.ID + "/finish/" + string(o.Status)
		}
		if !r.paceOK(pace, s.now, r.republishEvery()) {
			continue
		}
		if finish && slot.Seq == 0 && row.Detached != nil && s.now.Sub(slot.DueAt) >= r.republishEvery()/2 {
			// Past the dedup window a republish would not find the
			// original: look for it.
			seq, err := s.findCopy(ctx, row.Detached.OnFinish, wire.FinishMsgID(row.ID, o.Status, row.Finishes[o.Status].Ending))
			if err != nil {
				return err
			}
			if seq != 0 {
				if err := r.recordSeq(ctx, row.ID, o, seq); err != nil {
					return err
				}
				continue
			}
		}
		if slot.Seq != 0 {
			waiting, err := r.finishWaiting(ctx, slot.Seq)
			if err != nil {
				return err
			}
			if waiting {
				continue // its copy still waits for a deliverer
			}
		}
		var ack *jetstream.PubAck
		var err error
		if finish {
			ack, err = r.rt.PublishFinish(ctx, row, o.Status)
		} else {
			ack, err = r.rt.PublishNotice(ctx, row, o.Milestone)
		}
		if err != nil || ack == nil {
			return err
		}
		if ack.Sequence != slot.Seq {
			if err := r.recordSeq(ctx, row.ID, o, ack.Sequence); err != nil {
				return err
			}
		}
		if !ack.Duplicate {
			s.count(func(st *Stats) { st.Republished++ })
			if finish {
				obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "finish republished", "status", o.Status)
			} else {
				obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "milestone notice republished", "milestone", o.Milestone)
			}
		}
	}
	return nil
}

// unserved looks at a finish no deliverer has taken yet. Past
// FinishUnservedAfter, if no deliverer follows its handler, the row records
// that the handler has not been seen (unservedSince) and finish.unserved is
// reported, once. Past FinishUnservedWait it is dead-lettered; unserved
// then returns true.
func (s *sweep) unserved(ctx context.Context, row *jetruntype.Run, st events.Status) (bool, error) {
	r := s.r
	fs := row.Finishes[st]
	waited := s.now.Sub(fs.DueAt)
	if waited < r.cfg.FinishUnservedAfter {
		return false, nil
	}
	if row.Detached == nil {
		return false, nil
	}
	handler := row.Detached.OnFinish
	served, err := s.handlerServed(ctx, handler)
	if err != nil || served {
		return false, err
	}
	if waited >= r.cfg.FinishUnservedWait {
		return true, s.deadLetterUnserved(ctx, row, st, waited)
	}
	if !fs.UnservedSince.IsZero() {
		return false, nil
	}
	var marked bool
	if _, _, err := r.store.Mutate(ctx, row.ID, func(run *jetruntype.Run) error {
		marked = false
		if err := model.Apply(model.Of(run), model.FinishUnserved{Status: st}, s.now); err != nil {
			return err
		}
		marked = true
		return nil
	}); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
		return false, err
	}
	if marked {
		s.count(func(st *Stats) { st.Unserved++ })
		obs.Report(ctx, r.log, obs.FinishUnserved, row.ID, "status", st, "handler", handler,
			"waited", waited.Round(time.Millisecond), "dead_letter_in", (r.cfg.FinishUnservedWait - waited).Round(time.Millisecond))
	}
	return false, nil
}

// handlerServed reports whether a deliverer follows handler: its durable
// consumer exists and has a fetch waiting, a message in hand, or (a push
// consumer) a subscriber. The answer
// is kept for the sweep.
func (s *sweep) handlerServed(ctx context.Context, handler string) (bool, error) {
	s.mu.Lock()
	served, known := s.served[handler]
	s.mu.Unlock()
	if known {
		return served, nil
	}
	c, err := s.r.js.Consumer(ctx, s.r.ns.FinishStream(), wire.FinishConsumer(handler))
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		served = false
	case err != nil:
		return false, fmt.Errorf("look up the consumer of finish handler %s: %w", handler, err)
	default:
		info := c.CachedInfo()
		served = info.NumWaiting > 0 || info.NumAckPending > 0 || info.PushBound
	}
	s.mu.Lock()
	if s.served == nil {
		s.served = make(map[string]bool)
	}
	s.served[handler] = served
	s.mu.Unlock()
	return served, nil
}

// deadLetterUnserved files the finish for st in jetrun.dlq.finish.<handler>
// with the reason, records the failure on the row, and removes the copy
// waiting in the finish stream. The dead letter is written first: a crash
// before the row write files it again (at least once), never zero times.
func (s *sweep) deadLetterUnserved(ctx context.Context, row *jetruntype.Run, st events.Status, waited time.Duration) error {
	r := s.r
	ns := r.ns
	f, ok := model.Of(row).FinishMessage(st)
	if !ok {
		return nil
	}
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode finish of run %s: %w", row.ID, err)
	}
	fs := row.Finishes[st]
	reason := fmt.Sprintf("no deliverer took this finish for handler %q in %s: nothing serves the handler", f.Handler,
		waited.Round(time.Second))
	msgID := wire.FinishMsgID(row.ID, st, fs.Ending)
	dlq := &nats.Msg{Subject: ns.DLQFinishSubject(f.Handler), Data: data, Header: nats.Header{}}
	dlq.Header.Set(events.HeaderReason, reason)
	dlq.Header.Set(events.HeaderOriginalSubject, ns.FinishSubject(f.Handler))
	dlq.Header.Set(events.HeaderOriginalMsgID, msgID)
	if fs.Seq != 0 {
		dlq.Header.Set(events.HeaderOriginalSequence, strconv.FormatUint(fs.Seq, 10))
	}
	dlq.Header.Set(jetstream.MsgIDHeader, "dlq-unserved-"+msgID)
	if _, err := r.js.PublishMsg(ctx, dlq); err != nil {
		return fmt.Errorf("dead-letter the unserved finish of run %s: %w", row.ID, err)
	}
	var failed bool
	now := time.Now()
	next, _, err := r.store.Mutate(ctx, row.ID, func(run *jetruntype.Run) error {
		failed = false
		if err := model.Apply(model.Of(run), model.UnservedFinishFailed{Status: st, Reason: reason}, now); err != nil {
			return err // a deliverer took it after all
		}
		failed = true
		return nil
	})
	if errors.Is(err, runstore.ErrRunNotFound) {
		return nil
	}
	if err != nil || !failed {
		return err
	}
	if fs.Seq != 0 {
		if stream, err := r.finishStream(ctx); err == nil {
			if err := stream.DeleteMsg(ctx, fs.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				r.log.WarnContext(ctx, "remove dead-lettered finish", "run_id", row.ID, "seq", fs.Seq, "err", err)
			}
		}
	}
	s.count(func(st *Stats) { st.DeadLettered++ })
	obs.Report(ctx, r.log, obs.FinishFailed, row.ID, "status", st, "handler", f.Handler, "attempts", 0, "reason", reason)
	if err := r.store.Index().UnindexIfSettled(ctx, next); err != nil {
		r.log.WarnContext(ctx, "unindex settled run", "run_id", row.ID, "err", err)
	}
	return nil
}

// recordSeq records on run id's ledger the sequence of o's copy waiting in
// the finish stream.
func (r *Reconciler) recordSeq(ctx context.Context, id string, o model.Owed, seq uint64) error {
	_, _, err := r.store.Mutate(ctx, id, model.Mutation(time.Now(), o.SeqRecorded(seq)))
	if errors.Is(err, runstore.ErrRunNotFound) {
		return nil
	}
	return err
}

// findCopy returns the finish stream sequence of the copy of the finish
// with Nats-Msg-Id msgID waiting for handler, or 0. It reads the handler's
// subject once per sweep (message by message: a work-queue stream admits
// no second consumer on it) and keeps the answer for the sweep.
func (s *sweep) findCopy(ctx context.Context, handler, msgID string) (uint64, error) {
	s.mu.Lock()
	copies, known := s.copies[handler]
	s.mu.Unlock()
	if !known {
		stream, err := s.r.finishStream(ctx)
		if err != nil {
			return 0, err
		}
		subject := s.r.ns.FinishSubject(handler)
		copies = make(map[string]uint64)
		for seq := uint64(1); ; {
			m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return 0, fmt.Errorf("read the finishes waiting for handler %s: %w", handler, err)
			}
			if m.Sequence < seq {
				break // not an answer to "at or after seq": stop rather than loop
			}
			if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
				if _, dup := copies[id]; !dup {
					copies[id] = m.Sequence
				}
			}
			seq = m.Sequence + 1
		}
		s.mu.Lock()
		if s.copies == nil {
			s.copies = make(map[string]map[string]uint64)
		}
		s.copies[handler] = copies
		s.mu.Unlock()
	}
	return copies[msgID], nil
}

// finishWaiting reports whether the finish stream still holds seq.
func (r *Reconciler) finishWaiting(ctx context.Context, seq uint64) (bool, error) {
	stream, err := r.finishStream(ctx)
	if err != nil {
		return false, err
	}
	if _, err := stream.GetMsg(ctx, seq); err == nil {
		return true, nil
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, fmt.Errorf("look up finish %d: %w", seq, err)
	}
	return false, nil
}

func (r *Reconciler) finishStream(ctx context.Context) (jetstream.Stream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finishes == nil {
		s, err := r.js.Stream(ctx, r.ns.FinishStream())
		if err != nil {
			return nil, fmt.Errorf("reconcile: bind finish stream: %w", err)
		}
		r.finishes = s
	}
	return r.finishes, nil
}

// cascade cancels a live run whose parent was cancelled: it completes a
// cascade that a crash cut short. A parent given up (a budget, a window)
// is not cancelled: its children are left to finish (model.GaveUp).
func (s *sweep) cascade(ctx context.Context, row *jetruntype.Run) (bool, error) {
	if row.Parent == "" || (row.CancelRequested && !row.Teardown) {
		return false, nil
	}
	p, err := s.parent(ctx, row.Parent)
	if p == nil || err != nil {
		return false, err
	}
	if !model.Of(p).CancelCascades() {
		return false, nil
	}
	reason := "parent run " + p.ID + " was cancelled"
	aborted, changed := false, false
	now := time.Now()
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *jetruntype.Run) (err error) {
		err = model.Apply(model.Of(r), model.CancelRequested{Reason: reason, Held: s.r.holderAlive(ctx, r)}, now)
		changed = err == nil
		aborted = changed && r.Status == events.StatusAborted
		return err
	})
	if err != nil || !changed {
		return changed, err
	}
	if aborted {
		s.r.announce(ctx, next)
	} else {
		s.r.notifyCancel(ctx, next)
	}
	s.count(func(st *Stats) { st.Cancelled++ })
	obs.Report(ctx, s.r.log, obs.RunCascadeCancel, row.ID, "parent", p.ID)
	return true, nil
}

// parent returns the row of parent id as this sweep first read it (nil if
// it is gone): the children of a fan-out share one read per sweep.
func (s *sweep) parent(ctx context.Context, id string) (*jetruntype.Run, error) {
	s.mu.Lock()
	p, ok := s.parents[id]
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	p, _, err := s.r.store.Get(ctx, id)
	if errors.Is(err, runstore.ErrRunNotFound) {
		p, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.parents[id] = p
	s.mu.Unlock()
	return p, nil
}

// enforceBudgets gives up a detached run past its absolute budget, or silent
// for longer than its no-progress budget (armed by its first signal; a run
// waiting for a signal is not silent).
func (s *sweep) enforceBudgets(ctx context.Context, row *jetruntype.Run) (bool, error) {
	if row.Detached == nil || (row.Status != events.StatusRunning && row.Status != events.StatusStarting) {
		return false, nil
	}
	reason, text := s.overBudget(row, s.now)
	if reason == "" {
		s.noteBudget(row.ID, s.budgetDue(row, s.now))
		return false, nil
	}
	var gaveUp bool
	now := time.Now()
	next, _, err := s.r.store.Mutate(ctx, row.ID, func(r *jetruntype.Run) error {
		gaveUp = false
		if r.Status != events.StatusRunning && r.Status != events.StatusStarting {
			return runstore.ErrNoChange
		}
		if again, _ := s.overBudget(r, now); again == "" {
			return runstore.ErrNoChange // it signalled meanwhile
		}
		// Its child, if a live worker executes it, is torn down.
		if err := model.Apply(model.Of(r), model.GaveUp{Reason: reason, Error: text, Held: s.r.holderAlive(ctx, r)}, now); err != nil {
			return err
		}
		gaveUp = true
		return nil
	})
	if err != nil || !gaveUp {
		return gaveUp, err
	}
	s.r.announce(ctx, next)
	s.r.notifyCancel(ctx, next)
	s.count(func(st *Stats) { st.GivenUp++ })
	obs.Report(ctx, s.r.log, obs.BudgetExceeded, row.ID, "reason", reason, "child_still_running", next.ChildStillRunning)
	return true, nil
}

// overBudget returns the give-up reason and text, or "" if r is within its
// budgets at now.
func (s *sweep) overBudget(r *jetruntype.Run, now time.Time) (reason, text string) {
	cfg := s.r.cfg
	if budget, on := wire.Budget(r.Detached.MaxBudgetMs, cfg.MaxBudget); on && now.Sub(model.Of(r).BudgetSince()) > budget {
		return events.ReasonBudgetExceeded, fmt.Sprintf("ran past its absolute budget of %s", budget)
	}
	silence, on := wire.Budget(r.Detached.NoProgressBudgetMs, cfg.NoProgressBudget)
	if since, runs := model.Of(r).NoProgressSince(); on && runs && now.Sub(since) > silence {
		return events.ReasonNoProgress, fmt.Sprintf("made no progress for %s (its no-progress budget)", silence)
	}
	return "", ""
}

// recover re-publishes the dispatch of a run nothing will wake: "starting"
// past its grace, or running with a long-expired lease, whose dispatch
// message (row.dispatchSeq) is no longer in the dispatch stream. A dispatch
// still there, waiting for a free worker or for redelivery, is left alone,
// however long the fleet is busy. A "starting" run whose dispatch was never
// located gets it published under its run id, which the dedup window turns
// into a lookup when the original is still fresh. A run whose dispatch was
// lost MaxRedispatches times ends "error" (reason dispatch-lost).
func (s *sweep) recover(ctx context.Context, row *jetruntype.Run) error {
	r := s.r
	var why string
	switch {
	case row.Status == events.StatusStarting && s.now.Sub(model.Of(row).WaitingSince()) > r.cfg.StartingGrace:
		why = "dispatch lost before a worker took it"
	case row.Status == events.StatusRunning && !r.holderAlive(ctx, row) && s.now.Sub(row.LeaseUntil) > r.cfg.LeaseGrace:
		why = "lease expired and the dispatch that would wake a worker is gone"
	default:
		return nil
	}
	if !r.paceOK(row.ID+"/dispatch", s.now, max(r.cfg.StartingGrace, r.cfg.LeaseGrace)) {
		return nil
	}
	if row.DispatchSeq == 0 {
		// Where its dispatch is was never recorded (the parent writes the
		// row, then publishes; a worker's claim records it). Publish it
		// under the message id its writer used: a copy that did land
		// within the dedup window is not stored twice, and the answer says
		// where it is.
		seq, dup, err := r.publishDispatch(ctx, row, model.Of(row).DispatchMsgID())
		if err != nil {
			return err
		}
		if _, _, err := r.store.Mutate(ctx, row.ID, model.Mutation(time.Now(), model.DispatchRecorded{Seq: seq})); err != nil {
			return err
		}
		if !dup {
			s.count(func(st *Stats) { st.Recovered++ })
			obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "dispatched", "why", why)
		}
		return nil
	}
	if queued, err := r.rt.DispatchQueued(ctx, row.DispatchSeq); err != nil {
		return fmt.Errorf("run %s: %w", row.ID, err)
	} else if queued {
		return nil // still queued or held: it will wake a worker
	}
	if row.Redispatches >= r.cfg.MaxRedispatches {
		text := fmt.Sprintf("the run's dispatch was lost %d times; giving up", row.Redispatches+1)
		now := time.Now()
		next, _, err := r.store.Mutate(ctx, row.ID, func(run *jetruntype.Run) error {
			if run.Status.Final() || r.holderAlive(ctx, run) || run.DispatchSeq != row.DispatchSeq {
				return runstore.ErrNoChange
			}
			return model.Apply(model.Of(run), model.Ended{Status: events.StatusError, Reason: events.ReasonDispatchLost, Error: text}, now)
		})
		if err != nil {
			return err
		}
		if next.Status == events.StatusError && next.Reason == events.ReasonDispatchLost {
			r.announce(ctx, next)
			s.count(func(st *Stats) { st.Failed++ })
			obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "gave up", "reason", text)
		}
		return nil
	}
	n := row.Redispatches + 1
	seq, _, err := r.publishDispatch(ctx, row, model.Of(row).RedispatchMsgID(n))
	if err != nil {
		return err
	}
	// Unless claimed meanwhile: the extra dispatch is dropped by its worker.
	_, _, err = r.store.Mutate(ctx, row.ID, model.Mutation(time.Now(), model.Redispatched{Lost: row.DispatchSeq, Seq: seq}))
	if err != nil {
		return err
	}
	s.count(func(st *Stats) { st.Recovered++ })
	obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "re-dispatched", "why", why, "redispatches", n)
	return nil
}

// publishDispatch publishes the dispatch of row with msgID (one try) and
// returns its stream sequence, and whether the dedup window found it
// already stored.
func (r *Reconciler) publishDispatch(ctx context.Context, row *jetruntype.Run, msgID string) (uint64, bool, error) {
	p, err := r.rt.PublishDispatch(ctx, row.AgentType, model.Of(row).Dispatch(), engine.DispatchOptions{MsgID: msgID})
	if err != nil {
		return 0, false, fmt.Errorf("reconcile: re-dispatch run %s: %w", row.ID, err)
	}
	return p.Seq, p.Duplicate, nil
}

// announce publishes a transition the reconciler made; the next sweep
// republishes an owed finish if this fails. A run it ended or gave up with
// no worker holding it first counts the steps its lost attempt stored
// (countLostSteps).
func (r *Reconciler) announce(ctx context.Context, row *jetruntype.Run) {
	row = r.countLostSteps(ctx, row)
	if err := r.rt.Announce(ctx, row, ""); err != nil {
		r.fault(ctx, "announce transition", err, "run_id", row.ID, "status", row.Status)
	}
}
