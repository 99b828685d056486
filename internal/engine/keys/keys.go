// Package keys is the home of concurrency keys: Submit enters a keyed run
// under its key, Advance hands a key to its next run, Repair completes what
// a crash left half done, Requeue queues a resumed run again. The parent,
// the worker and the reconciler call these four; the key's state is stored
// by runstore.
//
// Runs submitted under one key (Run.ConcurrencyKey) never
// execute at the same time; the key's strategy (events.Strategy) says what a
// submit does while the key is taken. The key's state is a holder and a
// queue in the store (runstore.Keys: Holder, Queue, Take).
//
// A keyed run is created "queued" (no dispatch is out for it), entered in
// the key's queue, and then the key is advanced (Advance). The queue's
// order is the order of its entries in the bucket's stream (their
// revisions). The holder entry changes only by compare-and-set, to the
// first queued run, and only while the run it names is not live: that CAS
// is the lock. The run it names then goes queued → starting, and its
// dispatch is published.
//
// Whoever ends a keyed run advances its key (the worker that finishes it,
// a cancel of a queued run needs nothing). Every step is a compare-and-set
// or idempotent, so a process that dies anywhere leaves a state any later
// Advance completes: a holder naming a run still queued is promoted, a
// queue entry of a run no longer queued is dropped. The reconciler calls
// Advance for every queued run it sweeps, so a key whose last holder's
// worker died after its final write still moves on.
package keys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// advanceTries bounds Advance's rounds of lost compare-and-sets.
const advanceTries = 32

// Held names a dispatch message of a run that the caller holds (a worker
// that received it): when Advance promotes that run it records the
// message as the run's dispatch instead of publishing another.
type Held struct {
	RunID string
	Seq   uint64
}

// Submit enters the keyed run r (r.ConcurrencyKey set) under its key and
// applies its strategy: r is created queued (ErrRunExists if its id is
// taken), earlier queued runs are superseded (latest, debounce), and the
// key is advanced, which starts r at once when the key is free. It returns
// r's row as it then is: starting, or queued. A drop submit returns
// ErrKeyBusy when the key is taken. A queued debounce run gets a wake-up
// dispatch that a worker holds back until its quiet window ends, unless
// held is r's own dispatch.
func (rt keyed) submit(ctx context.Context, r *model.Row, held Held) (*model.Row, error) {
	key, strategy := r.ConcurrencyKey, wire.OrQueue(r.Strategy)
	if strategy == events.StrategyDrop {
		busy, err := rt.Store().Keys().Busy(ctx, key)
		if err != nil {
			return nil, err
		}
		if busy {
			return nil, keyBusy(key)
		}
	}
	now := time.Now()
	var queued model.Queued
	if held.RunID == r.ID {
		queued.SubmitSeq = held.Seq // published straight to the stream: order by it
	}
	if strategy == events.StrategyDebounce {
		d := r.Dispatch()
		queued.NotBefore = now.Add(wire.Debounce(&d))
	}
	if err := model.Apply(r, queued, now); err != nil {
		return nil, fmt.Errorf("jetrun: submit run %s under concurrency key %s: %w", r.ID, key, err)
	}
	if _, err := rt.Store().Create(ctx, r); err != nil {
		return nil, err
	}
	if strategy != events.StrategyDrop { // a drop run starts at once or is withdrawn: never seen waiting
		if err := rt.PublishStatus(ctx, r, "", wire.StatusMsgID(r.ID, 0, events.StatusQueued)); err != nil {
			return nil, err
		}
	}
	pos, err := rt.Store().Keys().Enqueue(ctx, key, r.ID)
	if err != nil {
		return nil, err
	}
	if strategy == events.StrategyLatest || strategy == events.StrategyDebounce {
		if err := rt.supersede(ctx, r, pos); err != nil {
			return nil, err
		}
	}
	if err := rt.advance(ctx, key, held); err != nil {
		return nil, err
	}
	row, rev, err := rt.Store().Get(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	if strategy == events.StrategyDrop && row.Status == events.StatusQueued {
		// Another submit took the key between the check and the queue:
		// withdraw, unless a promotion got there first.
		err := rt.Store().Keys().Withdraw(ctx, row, rev)
		if err == nil {
			return nil, keyBusy(key)
		}
		if !errors.Is(err, runstore.ErrConflict) {
			return nil, err
		}
		if row, _, err = rt.Store().Get(ctx, r.ID); err != nil {
			return nil, err
		}
	}
	if row.Status == events.StatusQueued && !row.NotBefore.IsZero() && held.RunID != row.ID {
		if _, err := rt.publishKeyed(ctx, row, row.ID+".wake"); err != nil {
			return nil, err
		}
	}
	return row, nil
}

func keyBusy(key string) error {
	return fmt.Errorf("jetrun: submit under concurrency key %s: %w (strategy drop: a run of the key is live or queued)", key, runstore.ErrKeyBusy)
}

// Requeue resumes the keyed run of row, interrupted with its child
// stopped, as a new attempt that waits for its key like a new submit: it
// is queued again (at the end of the key's queue) instead of starting at
// once, so it never runs alongside the key's holder. Of concurrent callers
// one requeues it; the others get the row as it is.
func (rt keyed) requeue(ctx context.Context, row *model.Row) (*model.Row, error) {
	row, _, err := rt.Resume(ctx, row, true)
	if err != nil {
		return nil, err
	}
	if row.Status != events.StatusQueued {
		return row, nil
	}
	if err := rt.Announce(ctx, row, ""); err != nil {
		return nil, err
	}
	if err := rt.repair(ctx, row); err != nil {
		return nil, err
	}
	row, _, err = rt.Store().Get(ctx, row.ID)
	return row, err
}

// RepairKey makes sure the queued run r has its entry in its key's queue
// (a submitter that died between the two writes left it without one), then
// advances the key. The reconciler calls it for every queued run.
func (rt keyed) repair(ctx context.Context, r *model.Row) error {
	if r.ConcurrencyKey == "" {
		return nil
	}
	if err := rt.Store().Keys().EnsureQueued(ctx, r); err != nil {
		return err
	}
	return rt.advance(ctx, r.ConcurrencyKey, Held{})
}

// advance gives key to its first queued run when the run holding it is
// no longer live, and starts that run. It is safe to call at any time, from
// any number of processes: the holder's compare-and-set admits one run at
// a time. A debounce run whose quiet window has not ended yet stays queued
// (its wake-up dispatch advances the key when it ends).
func (rt keyed) advance(ctx context.Context, key string, held Held) error {
	for range advanceTries {
		holder, holderRev, err := rt.Store().Keys().Holder(ctx, key)
		if err != nil {
			return err
		}
		if holder != "" {
			h, _, err := rt.Store().Get(ctx, holder)
			switch {
			case errors.Is(err, runstore.ErrRunNotFound): // cleared: the key is free
			case err != nil:
				return err
			case h.Status == events.StatusQueued:
				// Its promoter stopped after taking the key: finish the job.
				return rt.promote(ctx, h, held)
			case h.Live():
				return nil
			}
		}
		queue, err := rt.Store().Keys().Queue(ctx, key)
		if err != nil {
			return err
		}
		var next *model.Row
		for _, e := range queue {
			row, _, err := rt.Store().Get(ctx, e.ID)
			if errors.Is(err, runstore.ErrRunNotFound) {
				rt.Store().Keys().Dequeue(ctx, key, e.ID)
				continue
			}
			if err != nil {
				return err
			}
			if row.Status != events.StatusQueued {
				// Ended while queued, or promoted before a crash kept its
				// merge from being finished.
				if err := rt.finishMerge(ctx, row); err != nil {
					return err
				}
				rt.Store().Keys().Dequeue(ctx, key, e.ID)
				continue
			}
			if row.NotBefore.After(time.Now()) {
				return nil
			}
			next = row
			break
		}
		if next == nil {
			return nil
		}
		if next.Strategy == events.StrategyMerge {
			// The oldest of the merge runs queued together carries them.
			block, err := rt.mergeBlock(ctx, next)
			if err != nil {
				return err
			}
			next = block[0]
		}
		err = rt.Store().Keys().Take(ctx, key, next.ID, holderRev)
		if errors.Is(err, runstore.ErrConflict) {
			continue // another process moved the key: look again
		}
		if err != nil {
			return err
		}
		return rt.promote(ctx, next, held)
	}
	return fmt.Errorf("jetrun: advance concurrency key %s: %w", key, runstore.ErrConflict)
}

// promote starts h, which holds its key: queued → starting (a merge run
// takes the inputs of the merge runs queued behind it), then publishes its
// dispatch unless held is it.
func (rt keyed) promote(ctx context.Context, h *model.Row, held Held) error {
	var block []*model.Row // h and the merge runs queued with it, oldest first
	if h.Strategy == events.StrategyMerge {
		var err error
		if block, err = rt.mergeBlock(ctx, h); err != nil {
			return err
		}
	}
	promoted := false
	now := time.Now() // its budgets count from here, not from its wait in the queue
	row, _, err := rt.Store().Mutate(ctx, h.ID, func(r *model.Row) error {
		promoted = false
		if r.Status != events.StatusQueued {
			return runstore.ErrNoChange
		}
		var ev model.Promoted
		if r.Strategy == events.StrategyMerge {
			var err error
			if ev.Merged, ev.Input, err = merge(r, block); err != nil {
				return err
			}
		}
		if held.RunID == r.ID {
			ev.DispatchSeq = held.Seq
		}
		if err := model.Apply(r, ev, now); err != nil {
			return err
		}
		promoted = true
		return nil
	})
	if errors.Is(err, runstore.ErrRunNotFound) {
		rt.Store().Keys().Dequeue(ctx, h.ConcurrencyKey, h.ID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("jetrun: start run %s under concurrency key %s: %w", h.ID, h.ConcurrencyKey, err)
	}
	if err := rt.finishMerge(ctx, row); err != nil {
		return err
	}
	if !promoted || row.Status != events.StatusStarting || held.RunID == row.ID {
		rt.Store().Keys().Dequeue(ctx, h.ConcurrencyKey, h.ID)
		return nil
	}
	seq, err := rt.publishKeyed(ctx, row, row.DispatchMsgID())
	if err != nil {
		// The row is starting without a dispatch: the reconciler publishes
		// it, as for a parent that died between its two writes.
		return err
	}
	rt.Store().Keys().Dequeue(ctx, h.ConcurrencyKey, h.ID)
	_, _, err = rt.Store().Mutate(ctx, row.ID, func(r *model.Row) error {
		if r.Status != events.StatusStarting {
			return runstore.ErrNoChange
		}
		return model.Apply(r, model.DispatchRecorded{Seq: seq}, now) // unless one is recorded
	})
	return err
}

// merge returns what the merge run r, promoted, carries of block (r and
// the merge runs queued with it, oldest first): r and the oldest of the
// others that fit, the others' ids (merged) and every input carried, in a
// JSON list (input). The rest run next, merged among themselves.
func merge(r *model.Row, block []*model.Row) (merged []string, input json.RawMessage, err error) {
	size := len(r.Input)
	carried := map[string]bool{r.ID: true}
	for _, m := range block {
		if m.ID == r.ID {
			continue
		}
		if size += len(m.Input) + 1; size > events.MaxInputBytes-2 {
			break
		}
		merged = append(merged, m.ID)
		carried[m.ID] = true
	}
	var inputs []json.RawMessage
	for _, m := range block {
		if carried[m.ID] {
			in := m.Input
			if m.ID == r.ID {
				in = r.Input
			}
			inputs = append(inputs, in)
		}
	}
	input, err = json.Marshal(inputs)
	return merged, input, err
}

// mergeBlock returns h, a queued merge run, with the merge runs queued
// together with it (up to the nearest queued runs of other strategies in
// its key's queue), oldest first: by dispatch stream sequence between runs
// published straight to the stream, else by queue position (see
// submittedBefore).
func (rt keyed) mergeBlock(ctx context.Context, h *model.Row) ([]*model.Row, error) {
	queue, err := rt.Store().Keys().Queue(ctx, h.ConcurrencyKey)
	if err != nil {
		return nil, err
	}
	type queued struct {
		r   *model.Row
		pos uint64
	}
	var block []queued
	found := false
	for _, e := range queue {
		r := h
		if e.ID != h.ID {
			if r, _, err = rt.Store().Get(ctx, e.ID); errors.Is(err, runstore.ErrRunNotFound) {
				continue
			} else if err != nil {
				return nil, err
			}
			if r.Status != events.StatusQueued {
				continue
			}
		}
		if r.Strategy != events.StrategyMerge {
			if found {
				break
			}
			block = block[:0]
			continue
		}
		block = append(block, queued{r, e.Rev})
		found = found || e.ID == h.ID
	}
	if !found { // h has no queue entry (left by a crash): it merges nothing
		return []*model.Row{h}, nil
	}
	slices.SortStableFunc(block, func(a, b queued) int {
		switch {
		case submittedBefore(a.r, a.pos, b.r, b.pos):
			return -1
		case submittedBefore(b.r, b.pos, a.r, a.pos):
			return 1
		}
		return 0
	})
	out := make([]*model.Row, len(block))
	for i, q := range block {
		out[i] = q.r
	}
	return out, nil
}

// finishMerge ends the runs h carries (h.Merged) aborted, reason merged,
// and drops their queue entries. It is idempotent.
func (rt keyed) finishMerge(ctx context.Context, h *model.Row) error {
	now := time.Now()
	for _, id := range h.Merged {
		row, _, err := rt.Store().Mutate(ctx, id, model.Mutation(now, model.Merged{Into: h.ID}))
		if errors.Is(err, runstore.ErrRunNotFound) {
			rt.Store().Keys().Dequeue(ctx, h.ConcurrencyKey, id)
			continue
		}
		if err != nil {
			return fmt.Errorf("jetrun: merge run %s into %s: %w", id, h.ID, err)
		}
		if row.MergedInto == h.ID {
			rt.settle(ctx, row)
		}
		rt.Store().Keys().Dequeue(ctx, h.ConcurrencyKey, id)
	}
	return nil
}

// supersede ends the runs queued under me's key that were submitted before
// me (at queue position pos) aborted, reason superseded. When a run of the
// key submitted after me is queued already, or holds the key, me is the
// one superseded: a late arrival of an older message never replaces a newer
// one, nor runs after it.
func (rt keyed) supersede(ctx context.Context, me *model.Row, pos uint64) error {
	key := me.ConcurrencyKey
	queue, err := rt.Store().Keys().Queue(ctx, key)
	if err != nil {
		return err
	}
	newer := ""
	now := time.Now()
	for _, e := range queue {
		if e.ID == me.ID {
			continue
		}
		older := false
		row, _, err := rt.Store().Mutate(ctx, e.ID, func(r *model.Row) error {
			if r.Status != events.StatusQueued {
				return runstore.ErrNoChange
			}
			if older = submittedBefore(r, e.Rev, me, pos); !older {
				return runstore.ErrNoChange
			}
			return model.Apply(r, model.Superseded{By: me.ID}, now)
		})
		if errors.Is(err, runstore.ErrRunNotFound) {
			rt.Store().Keys().Dequeue(ctx, key, e.ID)
			continue
		}
		if err != nil {
			return fmt.Errorf("jetrun: supersede run %s: %w", e.ID, err)
		}
		if older && row.SupersededBy == me.ID && row.Reason == events.ReasonSuperseded {
			rt.settle(ctx, row)
		}
		if row.Status.Final() {
			rt.Store().Keys().Dequeue(ctx, key, e.ID)
		} else if !older && row.Status == events.StatusQueued {
			newer = row.ID
		}
	}
	if newer == "" && me.SubmitSeq > 0 {
		if newer, err = rt.newerHolder(ctx, me); err != nil {
			return err
		}
	}
	if newer == "" {
		return nil
	}
	row, _, err := rt.Store().Mutate(ctx, me.ID, model.Mutation(now, model.Superseded{By: newer}))
	if err != nil {
		return fmt.Errorf("jetrun: supersede run %s: %w", me.ID, err)
	}
	if row.SupersededBy == newer && row.Reason == events.ReasonSuperseded {
		rt.settle(ctx, row)
		rt.Store().Keys().Dequeue(ctx, key, me.ID)
	}
	return nil
}

// submittedBefore reports whether the queued run r, at queue position rev,
// was submitted before me, at pos: by their dispatch stream sequences when
// both were published straight to the stream (SubmitSeq), else by their
// positions in the key's queue.
func submittedBefore(r *model.Row, rev uint64, me *model.Row, pos uint64) bool {
	if r.SubmitSeq > 0 && me.SubmitSeq > 0 {
		return r.SubmitSeq < me.SubmitSeq
	}
	return rev < pos
}

// newerHolder returns the id of the live run holding me's key when it was
// published straight to the stream after me ("" otherwise).
func (rt keyed) newerHolder(ctx context.Context, me *model.Row) (string, error) {
	id, _, err := rt.Store().Keys().Holder(ctx, me.ConcurrencyKey)
	if err != nil || id == "" || id == me.ID {
		return "", err
	}
	h, _, err := rt.Store().Get(ctx, id)
	if errors.Is(err, runstore.ErrRunNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if h.Live() && h.SubmitSeq > me.SubmitSeq {
		return h.ID, nil
	}
	return "", nil
}

// settle announces a run a strategy ended and removes it from the index
// when nothing more is owed; failures are repaired by the reconciler.
func (rt keyed) settle(ctx context.Context, r *model.Row) {
	if err := rt.Announce(ctx, r, ""); err == nil {
		_ = rt.Store().Index().UnindexIfSettled(ctx, r)
	}
}

// publishKeyed publishes the dispatch of the keyed run r under msgID (one
// try: a failure leaves r starting without a dispatch, which the
// reconciler publishes).
func (rt keyed) publishKeyed(ctx context.Context, r *model.Row, msgID string) (uint64, error) {
	p, err := rt.PublishDispatch(ctx, r.AgentType, r.Dispatch(), engine.DispatchOptions{MsgID: msgID})
	return p.Seq, err
}

// keyed is the engine runtime seen from the key protocol.
type keyed struct{ *engine.Runtime }

// Submit enters the keyed run r under its key (see submit).
func Submit(ctx context.Context, rt *engine.Runtime, r *model.Row, held Held) (*model.Row, error) {
	return keyed{rt}.submit(ctx, r, held)
}

// Advance hands key to its first queued run when its holder is no longer
// live (see advance).
func Advance(ctx context.Context, rt *engine.Runtime, key string, held Held) error {
	return keyed{rt}.advance(ctx, key, held)
}

// Repair enters the queued run r in its key's queue if a crash kept it out,
// then advances the key (see repair).
func Repair(ctx context.Context, rt *engine.Runtime, r *model.Row) error {
	return keyed{rt}.repair(ctx, r)
}

// Requeue resumes the given-up keyed run row as a queued run (see requeue).
func Requeue(ctx context.Context, rt *engine.Runtime, row *model.Row) (*model.Row, error) {
	return keyed{rt}.requeue(ctx, row)
}
