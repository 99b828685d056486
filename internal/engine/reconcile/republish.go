package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// republishFinish publishes again a finish the ledger owes with no
// delivery under way (model.RepublishFinish), in case the transition's own
// publish was lost (a crash between the row write and the publish). A copy
// that finds its delivery done, or under way, is dropped by the deliverer.
//
// One copy per slot waits in the finish stream, however long: the stream's
// answer to a republish names the copy it holds (within the dedup window,
// the original), the ledger records its sequence, and no copy is published
// while that one is still in the stream (a work queue: it leaves when a
// deliverer is done with it, or at the stream's max age). Republishes are
// paced to once per dedup window.
//
// A finish no deliverer has taken is checked against its handler first
// (unserved). A finish whose copy the ledger does not know is looked for
// first, past the dedup window (findCopy).
func (s *sweep) republishFinish(ctx context.Context, row *model.Row, a model.RepublishFinish) error {
	r := s.r
	if a.Unserved != model.UnservedNothing {
		if gone, err := s.unserved(ctx, row, a); gone || err != nil {
			return err
		}
	}
	if !r.paceOK(row.ID+"/finish/"+string(a.Status), s.now, r.republishEvery()) {
		return nil
	}
	if a.LookForCopy {
		// Past the dedup window a republish would not find the original:
		// look for it.
		seq, err := s.findCopy(ctx, row.Detached.OnFinish, wire.FinishMsgID(row.ID, a.Status, a.Ending))
		if err != nil {
			return err
		}
		if seq != 0 {
			return r.record(ctx, row.ID, model.FinishSeqRecorded{Status: a.Status, Seq: seq})
		}
	}
	ack, err := s.publishCopy(ctx, row.ID, a.Copy, func() (*jetstream.PubAck, error) { return r.rt.PublishFinish(ctx, row, a.Status) },
		func(seq uint64) model.Event { return model.FinishSeqRecorded{Status: a.Status, Seq: seq} })
	if err == nil && ack != nil && !ack.Duplicate {
		obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "finish republished", "status", a.Status)
	}
	return err
}

// republishNotice publishes again a milestone notice the ledger owes with
// no delivery under way (model.RepublishNotice), as republishFinish does a
// finish.
func (s *sweep) republishNotice(ctx context.Context, row *model.Row, a model.RepublishNotice) error {
	r := s.r
	if !r.paceOK(row.ID+"/notice/"+a.Name, s.now, r.republishEvery()) {
		return nil
	}
	ack, err := s.publishCopy(ctx, row.ID, a.Copy, func() (*jetstream.PubAck, error) { return r.rt.PublishNotice(ctx, row, a.Name) },
		func(seq uint64) model.Event { return model.NoticeSeqRecorded{Name: a.Name, Seq: seq} })
	if err == nil && ack != nil && !ack.Duplicate {
		obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "milestone notice republished", "milestone", a.Name)
	}
	return err
}

// publishCopy publishes a copy of a finish or notice (publish) of run id,
// unless its copy at sequence waiting (0: unknown) is still in the finish
// stream, and records where the copy is (recorded) when that changed. It
// returns the stream's answer, nil when nothing was published.
func (s *sweep) publishCopy(ctx context.Context, id string, waiting uint64, publish func() (*jetstream.PubAck, error),
	recorded func(seq uint64) model.Event) (*jetstream.PubAck, error) {
	r := s.r
	if waiting != 0 {
		still, err := r.finishWaiting(ctx, waiting)
		if err != nil || still {
			return nil, err // its copy still waits for a deliverer
		}
	}
	ack, err := publish()
	if err != nil || ack == nil {
		return nil, err
	}
	if ack.Sequence != waiting {
		if err := r.record(ctx, id, recorded(ack.Sequence)); err != nil {
			return nil, err
		}
	}
	if !ack.Duplicate {
		s.count(func(st *Stats) { st.Republished++ })
	}
	return ack, nil
}

// unserved looks at a finish no deliverer has taken for
// FinishUnservedAfter (model.RepublishFinish.Unserved): if no deliverer
// follows its handler, the row records that the handler has not been seen
// (unservedSince) and finish.unserved is reported, once; past
// FinishUnservedWait it is dead-lettered instead, and unserved returns
// true.
func (s *sweep) unserved(ctx context.Context, row *model.Row, a model.RepublishFinish) (bool, error) {
	r := s.r
	served, err := s.handlerServed(ctx, a.Handler)
	if err != nil || served {
		return false, err
	}
	if a.Unserved == model.UnservedDeadLetter {
		return true, s.deadLetterUnserved(ctx, row, a)
	}
	var marked bool
	if _, _, err := r.store.Mutate(ctx, row.ID, func(run *model.Row) error {
		marked = false
		if err := model.Apply(run, model.FinishUnserved{Status: a.Status}, s.now); err != nil {
			return err
		}
		marked = true
		return nil
	}); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
		return false, err
	}
	if marked {
		s.count(func(st *Stats) { st.Unserved++ })
		obs.Report(ctx, r.log, obs.FinishUnserved, row.ID, "status", a.Status, "handler", a.Handler,
			"waited", a.Waited.Round(time.Millisecond), "dead_letter_in", (r.cfg.FinishUnservedWait - a.Waited).Round(time.Millisecond))
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

// deadLetterUnserved files the finish of a in jetrun.dlq.finish.<handler>
// with the reason, records the failure on the row, and removes the copy
// waiting in the finish stream. The dead letter is written first: a crash
// before the row write files it again (at least once), never zero times.
func (s *sweep) deadLetterUnserved(ctx context.Context, row *model.Row, a model.RepublishFinish) error {
	st, waited, seq := a.Status, a.Waited, a.Copy
	r := s.r
	ns := r.ns
	f, ok := row.FinishMessage(st)
	if !ok {
		return nil
	}
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode finish of run %s: %w", row.ID, err)
	}
	reason := fmt.Sprintf("no deliverer took this finish for handler %q in %s: nothing serves the handler", f.Handler,
		waited.Round(time.Second))
	msgID := wire.FinishMsgID(row.ID, st, a.Ending)
	dlq := &nats.Msg{Subject: ns.DLQFinishSubject(f.Handler), Data: data, Header: nats.Header{}}
	dlq.Header.Set(events.HeaderReason, reason)
	dlq.Header.Set(events.HeaderOriginalSubject, ns.FinishSubject(f.Handler))
	dlq.Header.Set(events.HeaderOriginalMsgID, msgID)
	if seq != 0 {
		dlq.Header.Set(events.HeaderOriginalSequence, strconv.FormatUint(seq, 10))
	}
	dlq.Header.Set(jetstream.MsgIDHeader, "dlq-unserved-"+msgID)
	if _, err := r.js.PublishMsg(ctx, dlq); err != nil {
		return fmt.Errorf("dead-letter the unserved finish of run %s: %w", row.ID, err)
	}
	var failed bool
	now := time.Now()
	next, _, err := r.store.Mutate(ctx, row.ID, func(run *model.Row) error {
		failed = false
		if err := model.Apply(run, model.UnservedFinishFailed{Status: st, Reason: reason}, now); err != nil {
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
	if seq != 0 {
		if stream, err := r.finishStream(ctx); err == nil {
			if err := stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				r.log.WarnContext(ctx, "remove dead-lettered finish", "run_id", row.ID, "seq", seq, "err", err)
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

// record writes ev, a mark of its ledger, on run id's row.
func (r *Reconciler) record(ctx context.Context, id string, ev model.Event) error {
	_, _, err := r.store.Mutate(ctx, id, model.Mutation(time.Now(), ev))
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
