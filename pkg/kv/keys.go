package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Concurrency keys. Runs submitted under one key (Run.ConcurrencyKey) never
// execute at the same time; the key's strategy (events.Strategy) says what a
// submit does while the key is taken. Two kinds of entries in the active
// bucket carry a key's state:
//
//	keyholder.<key>         the id of the run holding the key
//	keyqueue.<key>.<runId>  one entry per run waiting for the key
//
// A keyed run is created "queued" (no dispatch is out for it), entered in
// the key's queue, and then the key is advanced (AdvanceKey). The queue's
// order is the order of its entries in the bucket's stream (their
// revisions). The holder entry changes only by compare-and-set, to the
// first queued run, and only while the run it names is not live: that CAS
// is the lock. The run it names then goes queued → starting, and its
// dispatch is published.
//
// Whoever ends a keyed run advances its key (the worker that finishes it,
// a cancel of a queued run needs nothing). Every step is a compare-and-set
// or idempotent, so a process that dies anywhere leaves a state any later
// AdvanceKey completes: a holder naming a run still queued is promoted, a
// queue entry of a run no longer queued is dropped. The reconciler calls
// AdvanceKey for every queued run it sweeps, so a key whose last holder's
// worker died after its final write still moves on.

// ErrKeyBusy is returned by Submit for a drop submit while a run of its
// key is live or queued; no row is left behind.
var ErrKeyBusy = errors.New("concurrency key is busy")

const (
	keyHolderPrefix = "keyholder."
	keyQueuePrefix  = "keyqueue."
	// keyMarkerTTL is how long a queue entry's removal marker lives.
	keyMarkerTTL = time.Second
	// advanceTries bounds AdvanceKey's rounds of lost compare-and-sets.
	advanceTries = 32
)

// Held names a dispatch message of a run that the caller holds (a worker
// that received it): when AdvanceKey promotes that run it records the
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
func (s *Store) Submit(ctx context.Context, ns events.Namespace, r *jetruntype.Run, held Held) (*jetruntype.Run, error) {
	key, strategy := r.ConcurrencyKey, r.Strategy.Or()
	if strategy == events.StrategyDrop {
		busy, err := s.KeyBusy(ctx, key)
		if err != nil {
			return nil, err
		}
		if busy {
			return nil, keyBusy(key)
		}
	}
	now := time.Now()
	r.Status, r.Unindexed = events.StatusQueued, false
	if strategy == events.StrategyDebounce {
		d := r.Dispatch()
		r.NotBefore = now.Add(d.Debounce())
	}
	if _, err := s.Create(ctx, r); err != nil {
		return nil, err
	}
	if strategy != events.StrategyDrop { // a drop run starts at once or is withdrawn: never seen waiting
		if err := PublishStatus(ctx, s.js, ns, r, "", events.StatusMsgID(r.ID, 0, events.StatusQueued)); err != nil {
			return nil, err
		}
	}
	pos, err := s.enqueue(ctx, key, r.ID)
	if err != nil {
		return nil, err
	}
	if strategy == events.StrategyLatest || strategy == events.StrategyDebounce {
		if err := s.supersede(ctx, ns, key, r.ID, pos); err != nil {
			return nil, err
		}
	}
	if err := s.AdvanceKey(ctx, ns, key, held); err != nil {
		return nil, err
	}
	row, rev, err := s.Get(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	if strategy == events.StrategyDrop && row.Status == events.StatusQueued {
		// Another submit took the key between the check and the queue:
		// withdraw, unless a promotion got there first.
		err := s.withdraw(ctx, row, rev)
		if err == nil {
			return nil, keyBusy(key)
		}
		if !errors.Is(err, ErrConflict) {
			return nil, err
		}
		if row, _, err = s.Get(ctx, r.ID); err != nil {
			return nil, err
		}
	}
	if row.Status == events.StatusQueued && !row.NotBefore.IsZero() && held.RunID != row.ID {
		if _, err := s.publishDispatch(ctx, ns, row, row.ID+".wake"); err != nil {
			return nil, err
		}
	}
	return row, nil
}

func keyBusy(key string) error {
	return fmt.Errorf("kv: submit under concurrency key %s: %w (strategy drop: a run of the key is live or queued)", key, ErrKeyBusy)
}

// Requeue resumes the keyed run id, interrupted with its child stopped,
// as a new attempt that waits for its key like a new submit: it is queued
// again (at the end of the key's queue) instead of starting at once, so it
// never runs alongside the key's holder. Of concurrent callers one
// requeues it; the others get the row as it is.
func (s *Store) Requeue(ctx context.Context, ns events.Namespace, id string) (*jetruntype.Run, error) {
	row, _, err := s.Mutate(ctx, id, func(r *jetruntype.Run) error {
		if r.Status != events.StatusInterrupted || r.ChildStillRunning || r.ConcurrencyKey == "" {
			return ErrNoChange
		}
		r.Resume()
		r.Status = events.StatusQueued
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kv: requeue run %s: %w", id, err)
	}
	if row.Status != events.StatusQueued {
		return row, nil
	}
	if err := PublishStatus(ctx, s.js, ns, row, "", events.StatusMsgID(row.ID, row.Attempt, events.StatusQueued)); err != nil {
		return nil, err
	}
	if err := s.RepairKey(ctx, ns, row); err != nil {
		return nil, err
	}
	row, _, err = s.Get(ctx, id)
	return row, err
}

// RepairKey makes sure the queued run r has its entry in its key's queue
// (a submitter that died between the two writes left it without one), then
// advances the key. The reconciler calls it for every queued run.
func (s *Store) RepairKey(ctx context.Context, ns events.Namespace, r *jetruntype.Run) error {
	if r.ConcurrencyKey == "" {
		return nil
	}
	if err := s.EnsureQueued(ctx, r); err != nil {
		return err
	}
	return s.AdvanceKey(ctx, ns, r.ConcurrencyKey, Held{})
}

// EnsureQueued enters the queued run r in its key's queue unless it is
// there already.
func (s *Store) EnsureQueued(ctx context.Context, r *jetruntype.Run) error {
	if r.ConcurrencyKey == "" || r.Status != events.StatusQueued {
		return nil
	}
	_, err := s.enqueue(ctx, r.ConcurrencyKey, r.ID)
	return err
}

// KeyBusy reports whether a run of key is live or queued.
func (s *Store) KeyBusy(ctx context.Context, key string) (bool, error) {
	holder, _, err := s.keyHolder(ctx, key)
	if err != nil {
		return false, err
	}
	if holder != "" {
		h, _, err := s.Get(ctx, holder)
		if err == nil && (h.Live() || h.Status == events.StatusQueued) {
			return true, nil
		}
		if err != nil && !errors.Is(err, ErrRunNotFound) {
			return false, err
		}
	}
	queue, err := s.keyQueue(ctx, key)
	if err != nil {
		return false, err
	}
	for _, e := range queue {
		r, _, err := s.Get(ctx, e.id)
		if err == nil && r.Status == events.StatusQueued {
			return true, nil
		}
		if err != nil && !errors.Is(err, ErrRunNotFound) {
			return false, err
		}
	}
	return false, nil
}

// KeyHolder returns the id of the run that holds key or held it last ("":
// none ever did).
func (s *Store) KeyHolder(ctx context.Context, key string) (string, error) {
	id, _, err := s.keyHolder(ctx, key)
	return id, err
}

// KeyQueue returns the ids in key's queue, oldest first. Entries of runs
// no longer queued may linger until the key is next advanced.
func (s *Store) KeyQueue(ctx context.Context, key string) ([]string, error) {
	q, err := s.keyQueue(ctx, key)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(q))
	for i, e := range q {
		ids[i] = e.id
	}
	return ids, nil
}

// AdvanceKey gives key to its first queued run when the run holding it is
// no longer live, and starts that run. It is safe to call at any time, from
// any number of processes: the holder's compare-and-set admits one run at
// a time. A debounce run whose quiet window has not ended yet stays queued
// (its wake-up dispatch advances the key when it ends).
func (s *Store) AdvanceKey(ctx context.Context, ns events.Namespace, key string, held Held) error {
	for range advanceTries {
		holder, holderRev, err := s.keyHolder(ctx, key)
		if err != nil {
			return err
		}
		if holder != "" {
			h, _, err := s.Get(ctx, holder)
			switch {
			case errors.Is(err, ErrRunNotFound): // cleared: the key is free
			case err != nil:
				return err
			case h.Status == events.StatusQueued:
				// Its promoter stopped after taking the key: finish the job.
				return s.promote(ctx, ns, h, held)
			case h.Live():
				return nil
			}
		}
		queue, err := s.keyQueue(ctx, key)
		if err != nil {
			return err
		}
		var next *jetruntype.Run
		for _, e := range queue {
			row, _, err := s.Get(ctx, e.id)
			if errors.Is(err, ErrRunNotFound) {
				s.dequeue(ctx, key, e.id)
				continue
			}
			if err != nil {
				return err
			}
			if row.Status != events.StatusQueued {
				// Ended while queued, or promoted before a crash kept its
				// merge from being finished.
				if err := s.finishMerge(ctx, ns, row); err != nil {
					return err
				}
				s.dequeue(ctx, key, e.id)
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
		if holderRev == 0 {
			_, err = s.active.Create(ctx, keyHolderPrefix+key, []byte(next.ID))
		} else {
			_, err = s.active.Update(ctx, keyHolderPrefix+key, []byte(next.ID), holderRev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another process moved the key: look again
		}
		if err != nil {
			return fmt.Errorf("kv: take concurrency key %s for run %s: %w", key, next.ID, err)
		}
		return s.promote(ctx, ns, next, held)
	}
	return fmt.Errorf("kv: advance concurrency key %s: %w", key, ErrConflict)
}

// promote starts h, which holds its key: queued → starting (a merge run
// takes the inputs of the merge runs queued behind it), then publishes its
// dispatch unless held is it.
func (s *Store) promote(ctx context.Context, ns events.Namespace, h *jetruntype.Run, held Held) error {
	var merged []*jetruntype.Run
	if h.Strategy == events.StrategyMerge {
		var err error
		if merged, err = s.mergeCandidates(ctx, h); err != nil {
			return err
		}
	}
	promoted := false
	row, _, err := s.Mutate(ctx, h.ID, func(r *jetruntype.Run) error {
		if r.Status != events.StatusQueued {
			return ErrNoChange
		}
		r.Status, r.NotBefore = events.StatusStarting, time.Time{}
		if r.Strategy == events.StrategyMerge {
			inputs := []json.RawMessage{r.Input}
			size := len(r.Input)
			r.Merged = nil
			for _, m := range merged {
				if size += len(m.Input) + 1; size > events.MaxInputBytes-2 {
					break // the rest run next, merged among themselves
				}
				inputs = append(inputs, m.Input)
				r.Merged = append(r.Merged, m.ID)
			}
			list, err := json.Marshal(inputs)
			if err != nil {
				return err
			}
			r.Input = list
		}
		if held.RunID == r.ID {
			r.DispatchSeq = held.Seq
		}
		promoted = true
		return nil
	})
	if errors.Is(err, ErrRunNotFound) {
		s.dequeue(ctx, h.ConcurrencyKey, h.ID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("kv: start run %s under concurrency key %s: %w", h.ID, h.ConcurrencyKey, err)
	}
	if err := s.finishMerge(ctx, ns, row); err != nil {
		return err
	}
	if !promoted || row.Status != events.StatusStarting || held.RunID == row.ID {
		s.dequeue(ctx, h.ConcurrencyKey, h.ID)
		return nil
	}
	seq, err := s.publishDispatch(ctx, ns, row, row.ID+".key."+strconv.Itoa(row.Handoffs))
	if err != nil {
		// The row is starting without a dispatch: the reconciler publishes
		// it, as for a parent that died between its two writes.
		return err
	}
	s.dequeue(ctx, h.ConcurrencyKey, h.ID)
	_, _, err = s.Mutate(ctx, row.ID, func(r *jetruntype.Run) error {
		if r.Status != events.StatusStarting || r.DispatchSeq != 0 {
			return ErrNoChange
		}
		r.DispatchSeq = seq
		return nil
	})
	return err
}

// mergeCandidates returns the merge runs queued right behind h in its key's
// queue (up to the first queued run of another strategy).
func (s *Store) mergeCandidates(ctx context.Context, h *jetruntype.Run) ([]*jetruntype.Run, error) {
	queue, err := s.keyQueue(ctx, h.ConcurrencyKey)
	if err != nil {
		return nil, err
	}
	var out []*jetruntype.Run
	behind := false
	for _, e := range queue {
		if e.id == h.ID {
			behind = true
			continue
		}
		if !behind {
			continue
		}
		r, _, err := s.Get(ctx, e.id)
		if errors.Is(err, ErrRunNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if r.Status != events.StatusQueued {
			continue
		}
		if r.Strategy != events.StrategyMerge {
			break
		}
		out = append(out, r)
	}
	return out, nil
}

// finishMerge ends the runs h carries (h.Merged) aborted, reason merged,
// and drops their queue entries. It is idempotent.
func (s *Store) finishMerge(ctx context.Context, ns events.Namespace, h *jetruntype.Run) error {
	for _, id := range h.Merged {
		row, _, err := s.Mutate(ctx, id, func(r *jetruntype.Run) error {
			if r.Status != events.StatusQueued {
				return ErrNoChange
			}
			r.MergedInto = h.ID
			r.End(events.StatusAborted, events.ReasonMerged, "merged into run "+h.ID, time.Now())
			return nil
		})
		if errors.Is(err, ErrRunNotFound) {
			s.dequeue(ctx, h.ConcurrencyKey, id)
			continue
		}
		if err != nil {
			return fmt.Errorf("kv: merge run %s into %s: %w", id, h.ID, err)
		}
		if row.MergedInto == h.ID {
			s.settle(ctx, ns, row)
		}
		s.dequeue(ctx, h.ConcurrencyKey, id)
	}
	return nil
}

// supersede ends the runs queued under key before position pos (the queue
// entry of run by) aborted, reason superseded.
func (s *Store) supersede(ctx context.Context, ns events.Namespace, key, by string, pos uint64) error {
	queue, err := s.keyQueue(ctx, key)
	if err != nil {
		return err
	}
	for _, e := range queue {
		if e.rev >= pos || e.id == by {
			continue
		}
		row, _, err := s.Mutate(ctx, e.id, func(r *jetruntype.Run) error {
			if r.Status != events.StatusQueued {
				return ErrNoChange
			}
			r.SupersededBy = by
			r.End(events.StatusAborted, events.ReasonSuperseded, "superseded by run "+by, time.Now())
			return nil
		})
		if errors.Is(err, ErrRunNotFound) {
			s.dequeue(ctx, key, e.id)
			continue
		}
		if err != nil {
			return fmt.Errorf("kv: supersede run %s: %w", e.id, err)
		}
		if row.SupersededBy == by && row.Reason == events.ReasonSuperseded {
			s.settle(ctx, ns, row)
		}
		if row.Status.Final() {
			s.dequeue(ctx, key, e.id)
		}
	}
	return nil
}

// withdraw removes a drop submit that lost the key: its row (still queued
// at rev) and its queue entry.
func (s *Store) withdraw(ctx context.Context, r *jetruntype.Run, rev uint64) error {
	err := s.kv.Purge(ctx, r.ID, jetstream.LastRevision(rev), jetstream.PurgeTTL(markerTTL))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("kv: withdraw run %s: %w", r.ID, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("kv: withdraw run %s: %w", r.ID, err)
	}
	s.dequeue(ctx, r.ConcurrencyKey, r.ID)
	return s.Unindex(ctx, r)
}

// settle announces a run a strategy ended and removes it from the index
// when nothing more is owed; failures are repaired by the reconciler.
func (s *Store) settle(ctx context.Context, ns events.Namespace, r *jetruntype.Run) {
	if err := PublishTransition(ctx, s.js, ns, r, ""); err == nil {
		_ = s.UnindexIfSettled(ctx, r)
	}
}

func (s *Store) publishDispatch(ctx context.Context, ns events.Namespace, r *jetruntype.Run, msgID string) (uint64, error) {
	data, err := json.Marshal(r.Dispatch())
	if err != nil {
		return 0, fmt.Errorf("kv: encode dispatch of run %s: %w", r.ID, err)
	}
	ack, err := s.js.Publish(ctx, ns.DispatchSubject(r.AgentType), data, jetstream.WithMsgID(msgID))
	if err != nil {
		return 0, fmt.Errorf("kv: publish dispatch of run %s: %w", r.ID, err)
	}
	return ack.Sequence, nil
}

type queueEntry struct {
	id  string
	rev uint64
}

func (s *Store) enqueue(ctx context.Context, key, id string) (uint64, error) {
	k := keyQueuePrefix + key + "." + id
	rev, err := s.active.Create(ctx, k, []byte(id))
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, gerr := s.active.Get(ctx, k)
		if gerr != nil {
			return 0, fmt.Errorf("kv: queue run %s under key %s: %w", id, key, gerr)
		}
		return e.Revision(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("kv: queue run %s under key %s: %w", id, key, err)
	}
	return rev, nil
}

// dequeue drops a queue entry; a failure leaves it for a later AdvanceKey.
func (s *Store) dequeue(ctx context.Context, key, id string) {
	_ = s.active.Purge(ctx, keyQueuePrefix+key+"."+id, jetstream.PurgeTTL(keyMarkerTTL))
}

func (s *Store) keyHolder(ctx context.Context, key string) (string, uint64, error) {
	e, err := s.active.Get(ctx, keyHolderPrefix+key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("kv: read holder of concurrency key %s: %w", key, err)
	}
	return string(e.Value()), e.Revision(), nil
}

// keyQueue lists key's queue in order.
func (s *Store) keyQueue(ctx context.Context, key string) ([]queueEntry, error) {
	prefix := keyQueuePrefix + key + "."
	w, err := s.active.Watch(ctx, prefix+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("kv: list queue of concurrency key %s: %w", key, err)
	}
	defer w.Stop()
	var out []queueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kv: list queue of concurrency key %s: %w", key, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("kv: list queue of concurrency key %s: watcher closed", key)
			}
			if e == nil {
				slices.SortFunc(out, func(a, b queueEntry) int { return cmp.Compare(a.rev, b.rev) })
				return out, nil
			}
			out = append(out, queueEntry{id: strings.TrimPrefix(e.Key(), prefix), rev: e.Revision()})
		}
	}
}
