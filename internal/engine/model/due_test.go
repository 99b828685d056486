package model_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// policy is the Due table's reconciler: every duration distinct, so a
// cell's time says which one it crosses.
var policy = model.Policy{
	Interval:            5 * time.Second,
	DedupWindow:         2 * time.Minute,
	FinishUnservedAfter: time.Minute,
	FinishUnservedWait:  time.Hour,
	StartingGrace:       30 * time.Second,
	LeaseGrace:          20 * time.Second,
	MaxRedispatches:     3,
	MaxBudget:           24 * time.Hour,
	NoProgressBudget:    time.Hour,
}

// TestDueTable is what the reconciler does with a row: status × ledger
// state × time (× the facts the sweep read) → actions, in order.
func TestDueTable(t *testing.T) {
	det := func() *events.Detached { return &events.Detached{OnFinish: "h"} }
	row := func(s events.Status, edit func(r *model.Row)) *model.Row {
		r := &model.Row{ID: "r", AgentType: "a", Status: s, Detached: det(), CreatedAt: t0.Add(-time.Minute)}
		if s == events.StatusRunning {
			r.Worker, r.WorkerEpoch, r.Attempt, r.StartedAt, r.DispatchSeq = "w1", "e1", 1, t0.Add(-time.Minute), 7
			r.LeaseUntil = t0.Add(10 * time.Second)
		}
		if edit != nil {
			edit(r)
		}
		return r
	}
	// finished is a final row owing its finish, due ago, with slot.
	finished := func(ago time.Duration, slot model.Slot, edit func(r *model.Row)) *model.Row {
		return row(events.StatusCompleted, func(r *model.Row) {
			r.FinishedAt = t0.Add(-ago)
			slot.DueAt = r.FinishedAt
			r.Finishes = map[events.Status]*model.FinishState{events.StatusCompleted: {Slot: slot, Ending: 2}}
			if edit != nil {
				edit(r)
			}
		})
	}
	stopped := &model.Row{ID: "p", Status: events.StatusInterrupted, Reason: events.ReasonBudgetExceeded,
		Overrun: &jetruntype.Overrun{Owner: "p", Budget: "tokens", Limit: 1, Used: 2}}
	cancelled := &model.Row{ID: "p", Status: events.StatusAborted, Reason: events.ReasonCancelled}
	gaveUp := &model.Row{ID: "p", Status: events.StatusInterrupted, Reason: events.ReasonNoProgress,
		CancelRequested: true, Teardown: true}
	child := func(s events.Status) *model.Row {
		return row(s, func(r *model.Row) { r.Parent, r.Detached, r.CreatedAt = "p", nil, t0 })
	}
	for _, tc := range []struct {
		name  string
		row   *model.Row
		facts model.Facts
		want  []model.Action
	}{
		// Settled, final, and the ledger.
		{"settled", finished(time.Hour, model.Slot{}, func(r *model.Row) {
			r.Delivered = map[events.Status]time.Time{events.StatusCompleted: t0}
		}), model.Facts{}, []model.Action{model.Unindex{}}},
		{"finish due within an interval: the fast path's", finished(time.Second, model.Slot{}, nil), model.Facts{}, nil},
		{"finish due past an interval", finished(10*time.Second, model.Slot{}, nil), model.Facts{},
			[]model.Action{model.RepublishFinish{Status: events.StatusCompleted, Ending: 2}}},
		{"finish claimed by a deliverer", finished(10*time.Second, model.Slot{Attempts: 1, ClaimedUntil: t0.Add(time.Second)}, nil),
			model.Facts{}, nil},
		{"finish whose claim expired", finished(10*time.Second, model.Slot{Attempts: 1, ClaimedUntil: t0.Add(-time.Second)}, nil),
			model.Facts{}, []model.Action{model.RepublishFinish{Status: events.StatusCompleted, Ending: 2}}},
		{"finish with its copy recorded", finished(10*time.Second, model.Slot{Seq: 4}, nil), model.Facts{},
			[]model.Action{model.RepublishFinish{Status: events.StatusCompleted, Ending: 2, Copy: 4}}},
		{"finish untaken past unserved-after", finished(2*time.Minute, model.Slot{Seq: 4}, nil), model.Facts{},
			[]model.Action{model.RepublishFinish{Status: events.StatusCompleted, Ending: 2, Copy: 4,
				Unserved: model.UnservedMark, Handler: "h", Waited: 2 * time.Minute}}},
		{"finish untaken, its copy unknown past half the dedup window", finished(2*time.Minute, model.Slot{}, nil), model.Facts{},
			[]model.Action{model.RepublishFinish{Status: events.StatusCompleted, Ending: 2, LookForCopy: true,
				Unserved: model.UnservedMark, Handler: "h", Waited: 2 * time.Minute}}},
		{"finish untaken, marked unserved already", finished(2*time.Minute, model.Slot{Seq: 4}, func(r *model.Row) {
			r.Finishes[events.StatusCompleted].UnservedSince = t0.Add(-time.Minute)
		}), model.Facts{}, []model.Action{model.RepublishFinish{Status: events.StatusCompleted, Ending: 2, Copy: 4,
			Handler: "h", Waited: 2 * time.Minute}}},
		{"finish untaken past unserved-wait", finished(2*time.Hour, model.Slot{Seq: 4}, nil), model.Facts{},
			[]model.Action{model.RepublishFinish{Status: events.StatusCompleted, Ending: 2, Copy: 4,
				Unserved: model.UnservedDeadLetter, Handler: "h", Waited: 2 * time.Hour}}},
		{"finish taken once is never unserved", finished(2*time.Hour, model.Slot{Seq: 4, Attempts: 1}, nil), model.Facts{},
			[]model.Action{model.RepublishFinish{Status: events.StatusCompleted, Ending: 2, Copy: 4}}},
		{"finish failed: settled", finished(2*time.Hour, model.Slot{FailedAt: t0}, nil), model.Facts{},
			[]model.Action{model.Unindex{}}},
		{"notice owed on a running run", row(events.StatusRunning, func(r *model.Row) {
			r.Notices = map[string]*model.NoticeState{"m": {Slot: model.Slot{DueAt: t0.Add(-time.Minute), Seq: 3}}}
		}), model.Facts{HolderAlive: true}, []model.Action{model.RepublishNotice{Name: "m", Copy: 3},
			model.WatchBudget{At: t0.Add(6*time.Minute + time.Millisecond)}, model.AskHolder{Worker: "w1"}}},

		// Cancel, the parent, the key.
		{"cancel recorded, holder running it", row(events.StatusRunning, func(r *model.Row) {
			r.CancelRequested, r.Detached = true, nil
		}), model.Facts{HolderAlive: true}, []model.Action{model.RenotifyCancel{}, model.AskHolder{Worker: "w1"}}},
		{"parent stopped for its tree", child(events.StatusRunning), model.Facts{HolderAlive: true, Parent: stopped},
			[]model.Action{model.StopForTree{Overrun: *stopped.Overrun}}},
		{"given-up child of a tree stop: no second stop", row(events.StatusInterrupted, func(r *model.Row) {
			r.Parent, r.Detached, r.ChildStillRunning, r.Worker = "p", nil, true, "w1"
		}), model.Facts{HolderAlive: true, Parent: stopped}, nil},
		{"parent cancelled", child(events.StatusStarting), model.Facts{Parent: cancelled},
			[]model.Action{model.CascadeCancel{Parent: "p"}}},
		{"parent given up: no cascade", child(events.StatusStarting), model.Facts{Parent: gaveUp}, nil},
		{"parent gone", child(events.StatusStarting), model.Facts{}, nil},
		{"child cancelled already", row(events.StatusRunning, func(r *model.Row) {
			r.Parent, r.Detached, r.CancelRequested = "p", nil, true
		}), model.Facts{HolderAlive: true, Parent: cancelled}, []model.Action{model.RenotifyCancel{}, model.AskHolder{Worker: "w1"}}},
		{"queued on a key", row(events.StatusQueued, func(r *model.Row) { r.ConcurrencyKey = "k" }), model.Facts{},
			[]model.Action{model.AdvanceKey{Key: "k"}}},

		// Budgets.
		{"past its absolute budget", row(events.StatusRunning, func(r *model.Row) {
			r.Detached.MaxBudgetMs = 1000
		}), model.Facts{HolderAlive: true}, []model.Action{model.GiveUpByBudget{Reason: events.ReasonBudgetExceeded,
			Text: "ran past its absolute budget of 1s"}}},
		{"silent past its no-progress budget", row(events.StatusRunning, func(r *model.Row) {
			r.Detached.NoProgressBudgetMs, r.LastSignalAt = 10_000, t0.Add(-11*time.Second)
		}), model.Facts{HolderAlive: true}, []model.Action{model.GiveUpByBudget{Reason: events.ReasonNoProgress,
			Text: "made no progress for 10s (its no-progress budget)"}}},
		{"silent but waiting for a signal", row(events.StatusRunning, func(r *model.Row) {
			r.Detached.NoProgressBudgetMs, r.LastSignalAt, r.WaitingFor = 10_000, t0.Add(-11*time.Second), "approval"
			r.Detached.MaxBudgetMs = -1
		}), model.Facts{HolderAlive: true}, []model.Action{model.WatchBudget{At: t0.Add(time.Second + time.Millisecond)}, model.AskHolder{Worker: "w1"}}},
		{"no budgets at all", row(events.StatusRunning, func(r *model.Row) {
			r.Detached.MaxBudgetMs, r.Detached.NoProgressBudgetMs = -1, -1
		}), model.Facts{HolderAlive: true}, []model.Action{model.AskHolder{Worker: "w1"}}},

		// Lost workers and dispatches.
		{"given up, its worker lost long ago", row(events.StatusInterrupted, func(r *model.Row) {
			r.Detached, r.ChildStillRunning, r.Worker, r.LeaseUntil = nil, true, "w1", t0.Add(-time.Minute)
		}), model.Facts{}, []model.Action{model.ReleaseLostChild{}}},
		{"given up, its worker lost within the grace", row(events.StatusInterrupted, func(r *model.Row) {
			r.Detached, r.ChildStillRunning, r.Worker, r.LeaseUntil = nil, true, "w1", t0.Add(-time.Second)
		}), model.Facts{}, nil},
		{"given up, its worker alive", row(events.StatusInterrupted, func(r *model.Row) {
			r.Detached, r.ChildStillRunning, r.Worker, r.LeaseUntil = nil, true, "w1", t0.Add(-time.Minute)
		}), model.Facts{HolderAlive: true}, nil},
		{"starting within its grace", row(events.StatusStarting, func(r *model.Row) {
			r.Detached, r.CreatedAt = nil, t0.Add(-time.Second)
		}), model.Facts{}, nil},
		{"starting past its grace, dispatch never located", row(events.StatusStarting, func(r *model.Row) { r.Detached = nil }),
			model.Facts{}, []model.Action{model.Dispatch{Why: "dispatch lost before a worker took it"}}},
		{"starting past its grace", row(events.StatusStarting, func(r *model.Row) { r.Detached, r.DispatchSeq = nil, 5 }),
			model.Facts{}, []model.Action{model.Redispatch{Why: "dispatch lost before a worker took it", Lost: 5, N: 1}}},
		{"resumed: its wait counts from then", row(events.StatusStarting, func(r *model.Row) {
			r.Detached, r.DispatchSeq, r.ReadyAt = nil, 5, t0.Add(-time.Second)
		}), model.Facts{}, nil},
		{"lease long expired, no live holder", row(events.StatusRunning, func(r *model.Row) {
			r.Detached, r.LeaseUntil, r.Redispatches = nil, t0.Add(-time.Minute), 2
		}), model.Facts{}, []model.Action{model.Redispatch{Why: "lease expired and the dispatch that would wake a worker is gone", Lost: 7, N: 3}}},
		{"lease long expired, holder alive", row(events.StatusRunning, func(r *model.Row) {
			r.Detached, r.LeaseUntil = nil, t0.Add(-time.Minute)
		}), model.Facts{HolderAlive: true}, []model.Action{model.AskHolder{Worker: "w1"}}},
		{"dispatch lost too often", row(events.StatusRunning, func(r *model.Row) {
			r.Detached, r.LeaseUntil, r.Redispatches = nil, t0.Add(-time.Minute), 3
		}), model.Facts{}, []model.Action{model.FailDispatchLost{Lost: 7, Text: "the run's dispatch was lost 4 times; giving up"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.row.Clone()
			got := model.Due(tc.row, t0, policy, tc.facts)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Due:\n got %#v\nwant %#v", got, tc.want)
			}
			if !reflect.DeepEqual(tc.row, before) {
				t.Error("Due changed the row")
			}
		})
	}
}

// TestExpired: retention clears a settled run finished longer ago than the
// retention, never a live one, never with no retention.
func TestExpired(t *testing.T) {
	done := &model.Row{ID: "r", Status: events.StatusCompleted, FinishedAt: t0.Add(-2 * time.Hour)}
	live := &model.Row{ID: "r", Status: events.StatusRunning}
	for _, tc := range []struct {
		row       *model.Row
		retention time.Duration
		want      bool
	}{
		{done, time.Hour, true},
		{done, 3 * time.Hour, false},
		{done, 0, false},
		{live, time.Hour, false},
	} {
		if got := tc.row.Expired(t0, tc.retention); got != tc.want {
			t.Errorf("Expired(%s, retention %s) = %v, want %v", tc.row.Status, tc.retention, got, tc.want)
		}
	}
}
