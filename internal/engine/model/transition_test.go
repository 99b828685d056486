package model_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The state machine without a server: each case starts from a row, applies
// transitions, and checks what a reader of the row would see.
func TestTransitions(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	detached := &events.Detached{OnFinish: "h"}
	running := func(d *events.Detached) *model.Row {
		return &model.Row{ID: "r", Status: events.StatusRunning, Worker: "w", WorkerEpoch: "e", Attempt: 1, Detached: d}
	}
	w := model.Holder{Worker: "w", Attempt: 1}
	for _, tc := range []struct {
		name        string
		row         *model.Row
		apply       func(r *model.Row) error
		status      events.Status
		live        bool
		owed        []events.Status // finishes owed afterwards
		holder      string
		cancelAsked bool
		check       func(r *model.Row) error // what else a reader sees (nil: nothing)
	}{
		{
			name:   "end completed releases the lease and owes the finish",
			row:    running(detached),
			apply:  func(r *model.Row) error { return do(r, now, model.Ended{Status: events.StatusCompleted}) },
			status: events.StatusCompleted, owed: []events.Status{events.StatusCompleted},
		},
		{
			name: "end of an attached run owes nothing",
			row:  running(nil),
			apply: func(r *model.Row) error {
				return do(r, now, model.Ended{Status: events.StatusError, Reason: events.ReasonHandlerError, Error: "boom"})
			},
			status: events.StatusError,
		},
		{
			name: "a give-up with its child running keeps the holder",
			row:  running(detached),
			apply: func(r *model.Row) error {
				return do(r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over", Held: true})
			},
			status: events.StatusInterrupted, live: true, holder: "w", cancelAsked: true, owed: []events.Status{events.StatusInterrupted},
		},
		{
			name: "a give-up, then the child stops, then a resume",
			row:  running(detached),
			apply: func(r *model.Row) error {
				return do(r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over", Held: true},
					model.ChildStopped{}, model.Resumed{})
			},
			status: events.StatusStarting, live: true, owed: []events.Status{events.StatusInterrupted},
		},
		{
			name: "a resumed run that ends owes both endings, give-up first",
			row:  running(detached),
			apply: func(r *model.Row) error {
				if err := do(r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over"}, model.Resumed{},
					model.Claimed{Worker: "w", Epoch: "e"}); err != nil {
					return err
				}
				return do(r, now.Add(time.Second), model.Ended{Status: events.StatusCompleted})
			},
			status: events.StatusCompleted, owed: []events.Status{events.StatusInterrupted, events.StatusCompleted},
		},
		{
			name: "cancel of a held running run asks its worker",
			row:  running(nil),
			apply: func(r *model.Row) error {
				return do(r, now, model.CancelRequested{Reason: "user", Held: true})
			},
			status: events.StatusRunning, live: true, holder: "w", cancelAsked: true,
		},
		{
			name: "cancel of a run no live worker holds aborts it",
			row:  running(detached),
			apply: func(r *model.Row) error {
				return do(r, now, model.CancelRequested{Reason: "user"})
			},
			status: events.StatusAborted, cancelAsked: true, owed: []events.Status{events.StatusAborted},
		},
		{
			name: "cancel of a final run changes nothing",
			row:  &model.Row{ID: "r", Status: events.StatusCompleted},
			apply: func(r *model.Row) error {
				if err := model.Apply(r, model.CancelRequested{Reason: "user"}, now); !errors.Is(err, model.ErrNoChange) {
					return fmt.Errorf("a final run took a cancel: %v", err)
				}
				return nil
			},
			status: events.StatusCompleted,
		},
		{
			name: "a run that ends waits for nothing more (issue 36: found by FuzzApply)",
			row: &model.Row{ID: "r", Status: events.StatusRunning, Worker: "dead", Attempt: 1, StartedAt: now,
				WaitingFor: "approve"},
			apply:  func(r *model.Row) error { return do(r, now, model.CancelRequested{Reason: "user"}) },
			status: events.StatusAborted, cancelAsked: true,
			check: func(r *model.Row) error {
				if r.WaitingFor != "" {
					return fmt.Errorf("aborted, waiting for %q", r.WaitingFor)
				}
				return nil
			},
		},
		// The no-progress clock (issue 35, item 6).
		{
			name: "a takeover after a long wait restarts an armed no-progress clock",
			row: &model.Row{ID: "r", Status: events.StatusRunning, Worker: "dead", WorkerEpoch: "gone", Attempt: 1,
				WaitingFor: "approve", StartedAt: now.Add(-2 * time.Hour), LastSignalAt: now.Add(-time.Hour)},
			apply: func(r *model.Row) error {
				return do(r, now, model.Claimed{Worker: "w", Epoch: "e", DispatchSeq: 7})
			},
			status: events.StatusRunning, live: true, holder: "w",
			check: func(r *model.Row) error {
				since, runs := r.NoProgressSince()
				if r.Attempt != 2 || r.WaitingFor != "" || !runs || !since.Equal(now) || !r.StartedAt.Equal(now.Add(-2*time.Hour)) {
					return fmt.Errorf("claimed: attempt %d, waitingFor %q, no-progress since %v (runs %v), startedAt %v",
						r.Attempt, r.WaitingFor, since, runs, r.StartedAt)
				}
				return nil
			},
		},
		{
			name:   "a claim leaves an unarmed no-progress clock unarmed",
			row:    &model.Row{ID: "r", Status: events.StatusStarting},
			apply:  func(r *model.Row) error { return do(r, now, model.Claimed{Worker: "w", Epoch: "e", DispatchSeq: 7}) },
			status: events.StatusRunning, live: true, holder: "w",
			check: func(r *model.Row) error {
				if _, runs := r.NoProgressSince(); runs || !r.StartedAt.Equal(now) {
					return fmt.Errorf("no-progress runs %v, startedAt %v", runs, r.StartedAt)
				}
				return nil
			},
		},
		{
			name: "the end of a wait restarts the no-progress clock; a wait that follows another is still a wait",
			row: &model.Row{ID: "r", Status: events.StatusRunning, Worker: "w", Attempt: 1,
				WaitingFor: "approve", LastSignalAt: now.Add(-time.Hour)},
			apply: func(r *model.Row) error {
				if err := do(r, now.Add(-time.Minute), model.Waiting{By: w, Name: "run:child"}); err != nil {
					return err
				}
				if _, runs := r.NoProgressSince(); runs || !r.LastSignalAt.Equal(now.Add(-time.Hour)) {
					return fmt.Errorf("waiting again: no-progress runs %v from %v", runs, r.LastSignalAt)
				}
				return do(r, now, model.Waiting{By: w}) // e.g. its hand-back, or the wait timed out
			},
			status: events.StatusRunning, live: true, holder: "w",
			check: func(r *model.Row) error {
				if since, runs := r.NoProgressSince(); !runs || !since.Equal(now) {
					return fmt.Errorf("no-progress since %v (runs %v), want from the wait's end", since, runs)
				}
				return nil
			},
		},
		// A give-up is not a cancel (issue 35, item 7).
		{
			name: "a give-up asks its child to stop but does not cancel its descendants",
			row:  running(detached),
			apply: func(r *model.Row) error {
				return do(r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over", Held: true})
			},
			status: events.StatusInterrupted, live: true, holder: "w", cancelAsked: true,
			owed: []events.Status{events.StatusInterrupted},
			check: func(r *model.Row) error {
				if r.CancelCascades() || !r.Teardown || r.CancelledAttempt("w") != 1 {
					return fmt.Errorf("cascades %v, teardown %v, cancelled attempt %d", r.CancelCascades(), r.Teardown, r.CancelledAttempt("w"))
				}
				return nil
			},
		},
		{
			name: "a cancel of a given-up run cancels its descendants",
			row:  running(detached),
			apply: func(r *model.Row) error {
				return do(r, now, model.GaveUp{Reason: events.ReasonNoProgress, Error: "silent", Held: true},
					model.ChildStopped{}, model.CancelRequested{Reason: "user"})
			},
			status: events.StatusInterrupted, cancelAsked: true, owed: []events.Status{events.StatusInterrupted},
			check: func(r *model.Row) error {
				if !r.CancelCascades() || r.CancelReason != "user" {
					return fmt.Errorf("cascades %v, cancelReason %q", r.CancelCascades(), r.CancelReason)
				}
				return nil
			},
		},
		{
			name: "a give-up of a run whose cancel is pending keeps the cancel",
			row:  running(detached),
			apply: func(r *model.Row) error {
				return do(r, now, model.CancelRequested{Reason: "user", Held: true},
					model.GaveUp{Reason: events.ReasonWindowExceeded, Error: "late", Held: true})
			},
			status: events.StatusInterrupted, live: true, holder: "w", cancelAsked: true,
			owed: []events.Status{events.StatusInterrupted},
			check: func(r *model.Row) error {
				if !r.CancelCascades() || r.CancelReason != "user" {
					return fmt.Errorf("cascades %v, cancelReason %q", r.CancelCascades(), r.CancelReason)
				}
				return nil
			},
		},
		{
			name: "a stop for a tree's budget is not a cancel",
			row:  running(nil),
			apply: func(r *model.Row) error {
				return do(r, now, model.BudgetStopped{Overrun: jetruntype.Overrun{Owner: "root", Budget: "tokens", Limit: 10, Used: 2}, Held: true})
			},
			status: events.StatusInterrupted, live: true, holder: "w", cancelAsked: true,
			check: func(r *model.Row) error {
				if r.CancelCascades() {
					return errors.New("a tree stop cascades as a cancel")
				}
				return nil
			},
		},
		// A cancel event is for one attempt (issue 35, item 8).
		{
			name: "a given-up attempt's cancel is not the retried attempt's",
			row:  running(detached),
			apply: func(r *model.Row) error {
				if err := do(r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over", Held: true}); err != nil {
					return err
				}
				stale := r.CancelEvent(now)
				if err := do(r, now.Add(time.Second), model.ChildStopped{}, model.Resumed{}); err != nil {
					return err
				}
				if err := do(r, now.Add(2*time.Second), model.Claimed{Worker: "w", Epoch: "e", DispatchSeq: 8}); err != nil {
					return err
				}
				if stale.Attempt != 1 || r.Attempt != 2 || r.CancelledAttempt("w") != 0 {
					return fmt.Errorf("stale cancel for attempt %d; the row at attempt %d cancels attempt %d",
						stale.Attempt, r.Attempt, r.CancelledAttempt("w"))
				}
				if err := do(r, now.Add(3*time.Second), model.CancelRequested{Reason: "user", Held: true}); err != nil {
					return err
				}
				if ev := r.CancelEvent(now); ev.Attempt != 2 || r.CancelledAttempt("w") != 2 || r.CancelledAttempt("other") != 0 {
					return fmt.Errorf("cancel event for attempt %d; cancelled attempt of w %d", ev.Attempt, r.CancelledAttempt("w"))
				}
				return nil
			},
			status: events.StatusRunning, live: true, holder: "w", cancelAsked: true,
			owed: []events.Status{events.StatusInterrupted},
		},
		// Hand-offs and dispatch ids of retries (issue 35, item 9).
		{
			name: "resumes with no attempt between count the given-up attempt once",
			row:  running(detached),
			apply: func(r *model.Row) error {
				if err := do(r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over"}); err != nil {
					return err
				}
				if err := do(r, now.Add(time.Second), model.Resumed{}); err != nil {
					return err
				}
				first := r.DispatchMsgID()
				r.Redispatches = 3
				if err := do(r, now.Add(2*time.Second), model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over again"}); err != nil {
					return err
				}
				if err := do(r, now.Add(3*time.Second), model.Resumed{}); err != nil {
					return err
				}
				if r.Handoffs != 1 || r.Attempt-r.Handoffs != 0 {
					return fmt.Errorf("attempt %d, handoffs %d: want the one attempt refunded once", r.Attempt, r.Handoffs)
				}
				if r.DispatchMsgID() == first || r.Redispatches != 0 || r.RedispatchMsgID(1) == first+".redispatch.1" {
					return fmt.Errorf("second resume: dispatch id %s (first %s), redispatches %d", r.DispatchMsgID(), first, r.Redispatches)
				}
				return nil
			},
			status: events.StatusStarting, live: true, owed: []events.Status{events.StatusInterrupted},
		},
		{
			name: "a resume of a run that never ran counts no hand-off",
			row:  &model.Row{ID: "r", Status: events.StatusStarting, Detached: detached},
			apply: func(r *model.Row) error {
				if err := do(r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over"}); err != nil {
					return err
				}
				if err := do(r, now.Add(time.Second), model.Resumed{}); err != nil {
					return err
				}
				if r.Handoffs != 0 {
					return fmt.Errorf("handoffs %d with no attempt", r.Handoffs)
				}
				return nil
			},
			status: events.StatusStarting, live: true, owed: []events.Status{events.StatusInterrupted},
		},
		{
			name: "an attempt handed back, given up and retried, or blinked, counts once",
			row:  running(detached),
			apply: func(r *model.Row) error {
				if err := do(r, now, model.HandedBack{By: w}, // on shutdown
					model.Blinked{Attempt: 1}, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over"}); err != nil {
					return err
				}
				if err := do(r, now.Add(time.Second), model.Resumed{}); err != nil {
					return err
				}
				if r.Handoffs != 1 {
					return fmt.Errorf("handoffs %d, want 1", r.Handoffs)
				}
				return nil
			},
			status: events.StatusStarting, live: true, owed: []events.Status{events.StatusInterrupted},
		},
		{
			name: "each promotion of a keyed run has its own dispatch id",
			row:  &model.Row{ID: "r", Status: events.StatusStarting, ConcurrencyKey: "k", ReadyAt: now},
			apply: func(r *model.Row) error {
				first := r.DispatchMsgID()
				r.ReadyAt = now.Add(time.Second)
				if r.DispatchMsgID() == first {
					return fmt.Errorf("two promotions share dispatch id %s", first)
				}
				return nil
			},
			status: events.StatusStarting, live: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.row
			if err := tc.apply(r); err != nil {
				t.Fatal(err)
			}
			run := r
			if run.Status != tc.status || run.Live() != tc.live || run.Worker != tc.holder || run.CancelRequested != tc.cancelAsked {
				t.Fatalf("status %s live %v worker %q cancelRequested %v; want %s %v %q %v",
					run.Status, run.Live(), run.Worker, run.CancelRequested, tc.status, tc.live, tc.holder, tc.cancelAsked)
			}
			if tc.check != nil {
				if err := tc.check(r); err != nil {
					t.Fatal(err)
				}
			}
			owed := r.PendingFinishes()
			if len(owed) != len(tc.owed) {
				t.Fatalf("finishes owed %v, want %v", owed, tc.owed)
			}
			for i := range owed {
				if owed[i] != tc.owed[i] {
					t.Fatalf("finishes owed %v, want %v", owed, tc.owed)
				}
			}
		})
	}
}

// Finishes and notices are one kind of slot to the reconciler: Owed lists
// both, and RecordSeq records a waiting copy on either.
func TestOwedListsFinishesThenNotices(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	r := &model.Row{ID: "r", Status: events.StatusRunning,
		Detached: &events.Detached{OnFinish: "h", OnMilestones: []string{"draft"}}}
	if err := do(r, now, model.NoticeOwed{Milestone: events.Milestone{Name: "draft", Sequence: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := do(r, now.Add(time.Second), model.Ended{Status: events.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	owed := r.Owed()
	if len(owed) != 2 || owed[0].Status != events.StatusCompleted || owed[1].Milestone != "draft" {
		t.Fatalf("owed %+v; want the completed finish, then the draft notice", owed)
	}
	for i, o := range owed {
		if err := model.Apply(r, o.SeqRecorded(uint64(10+i)), now); err != nil {
			t.Fatal(err)
		}
		if err := model.Apply(r, o.SeqRecorded(uint64(10+i)), now); !errors.Is(err, model.ErrNoChange) {
			t.Fatalf("recording the same copy twice: %v", err)
		}
	}
	if r.Finishes[events.StatusCompleted].Seq != 10 || r.Notices["draft"].Seq != 11 {
		t.Fatalf("seqs %d %d", r.Finishes[events.StatusCompleted].Seq, r.Notices["draft"].Seq)
	}
	if err := do(r, now, model.NoticeDelivered{Name: "draft"}, model.FinishDelivered{Status: events.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	if len(r.Owed()) != 0 {
		t.Fatalf("owed after delivery: %+v", r.Owed())
	}
}

// do applies evs to r in order at now, each of which must change r.
func do(r *model.Row, now time.Time, evs ...model.Event) error {
	for _, ev := range evs {
		if err := model.Apply(r, ev, now); err != nil {
			return fmt.Errorf("%T: %w", ev, err)
		}
	}
	return nil
}
