package model_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// t0 is the tables' clock: every row was created an hour before it.
var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// holder is the attempt that holds the held fixtures.
var holder = model.Holder{Worker: "w1", Epoch: "e1", Attempt: 2}

// fixtures are one row in every state a row can be in, each valid
// (model.Check): the columns of the status × event table.
func fixtures() []struct {
	name string
	row  *model.Row
} {
	detached := &events.Detached{OnFinish: "h"}
	base := func(s events.Status) *model.Row {
		return &model.Row{ID: "r", AgentType: "a", Status: s, Detached: detached, CreatedAt: t0.Add(-time.Hour)}
	}
	queued := base(events.StatusQueued)
	queued.ConcurrencyKey, queued.Strategy = "k", events.StrategyMerge
	starting := base(events.StatusStarting)
	starting.DispatchSeq = 5
	running := base(events.StatusRunning)
	running.Worker, running.WorkerEpoch, running.Attempt = holder.Worker, holder.Epoch, holder.Attempt
	running.StartedAt, running.DispatchSeq = t0.Add(-30*time.Minute), 7
	released := running.Clone()
	released.Worker, released.WorkerEpoch = "", ""
	givenUp := running.Clone()
	givenUp.Status, givenUp.Reason, givenUp.Error, givenUp.Retryable = events.StatusInterrupted, events.ReasonNoProgress, "silent", true
	givenUp.ChildStillRunning, givenUp.FinishedAt = true, t0.Add(-time.Minute)
	givenUp.CancelRequested, givenUp.CancelReason, givenUp.Teardown = true, events.ReasonNoProgress, true
	givenUp.Finishes = map[events.Status]*model.FinishState{events.StatusInterrupted: {Slot: model.Slot{DueAt: givenUp.FinishedAt}}}
	stopped := givenUp.Clone()
	stopped.Worker, stopped.WorkerEpoch, stopped.ChildStillRunning = "", "", false
	final := func(s events.Status, reason string) *model.Row {
		r := released.Clone()
		r.Status, r.Reason, r.Error, r.FinishedAt = s, reason, "", t0.Add(-time.Minute)
		r.Finishes = map[events.Status]*model.FinishState{s: {Slot: model.Slot{DueAt: r.FinishedAt}}}
		return r
	}
	return []struct {
		name string
		row  *model.Row
	}{
		{"queued", queued},
		{"starting", starting},
		{"running", running},
		{"running-released", released},
		{"interrupted-child-running", givenUp},
		{"interrupted-child-stopped", stopped},
		{"completed", final(events.StatusCompleted, "")},
		{"error", final(events.StatusError, events.ReasonHandlerError)},
		{"aborted", final(events.StatusAborted, events.ReasonCancelled)},
	}
}

// Outcomes of one cell of the table.
const (
	noChange   = "no-change"   // model.ErrNoChange, the row as it was
	notHolder  = "not-holder"  // a *TransitionError wrapping ErrNotHolder
	notAllowed = "not-allowed" // a *TransitionError wrapping ErrNotAllowed
	overrun    = "overrun"     // an *OverrunError
)

// cells says, per fixture name, the outcome of an event: one of the
// outcomes above, or the status the row is in after a change; "*" is every
// fixture not named.
type cells map[string]string

// The state machine's table: every event against every state a row can
// be in. An allowed event changes the row into a valid one (model.Check),
// with the fields fields checks; a refused one or one with nothing to do
// leaves the row as it was.
func TestApplyTable(t *testing.T) {
	overBy := jetruntype.Overrun{Owner: "root", Budget: "tokens", Limit: 10, Used: 20}
	milestone := events.Milestone{RunID: "r", Name: "m", Sequence: 1}
	repaired := events.StatusEvent{RunID: "r", Status: events.StatusCompleted, Attempt: 2, At: t0.Add(-time.Minute)}
	for _, tc := range []struct {
		ev     model.Event
		want   cells
		fields func(before, after *model.Row) error // for the allowed cells
	}{
		{
			ev:   model.Claimed{Worker: "w2", Epoch: "e2", DispatchSeq: 9},
			want: cells{"starting": "running", "running": "running", "running-released": "running", "*": notAllowed},
			fields: func(b, a *model.Row) error {
				if a.Attempt != b.Attempt+1 || a.Worker != "w2" || a.WorkerEpoch != "e2" || a.DispatchSeq != 9 || a.Reason != "" {
					return fmt.Errorf("attempt %d worker %s/%s dispatchSeq %d reason %q", a.Attempt, a.Worker, a.WorkerEpoch, a.DispatchSeq, a.Reason)
				}
				return nil
			},
		},
		{
			// A short run's attempt ends it without a claim: only a run
			// still waiting for its first attempt, never one any attempt
			// claimed or ended.
			ev: model.EndedWithoutClaim{Attempt: 1, DispatchSeq: 9, StartedAt: t0.Add(-2 * time.Hour), Status: events.StatusCompleted,
				Summary: "done", Output: json.RawMessage(`1`)},
			want: cells{"starting": "completed", "*": notHolder},
			fields: func(b, a *model.Row) error {
				if a.Attempt != 1 || a.DispatchSeq != 9 || !a.StartedAt.Equal(b.CreatedAt) || !a.FinishedAt.Equal(t0) ||
					a.Summary != "done" || a.Worker != "" || a.Finishes[events.StatusCompleted] == nil {
					return fmt.Errorf("attempt %d dispatchSeq %d startedAt %v finishedAt %v summary %q worker %q finishes %v",
						a.Attempt, a.DispatchSeq, a.StartedAt, a.FinishedAt, a.Summary, a.Worker, a.Finishes)
				}
				return nil
			},
		},
		{
			ev:   model.HandedBack{By: holder},
			want: cells{"running": "running", "interrupted-child-running": "interrupted", "*": notHolder},
			fields: func(b, a *model.Row) error {
				if a.Worker != "" || a.Handoffs != b.Handoffs+1 || a.HandedOff != b.Attempt {
					return fmt.Errorf("worker %q handoffs %d handedOff %d", a.Worker, a.Handoffs, a.HandedOff)
				}
				return nil
			},
		},
		{
			ev:   model.Lapsed{By: holder},
			want: cells{"running": "running", "interrupted-child-running": "interrupted", "*": notHolder},
			fields: func(b, a *model.Row) error {
				if a.Worker != "" || len(a.Blinks) != 1 || a.Blinks[0] != holder.Attempt || a.Handoffs != b.Handoffs+1 {
					return fmt.Errorf("worker %q blinks %v handoffs %d", a.Worker, a.Blinks, a.Handoffs)
				}
				return nil
			},
		},
		{
			ev: model.Blinked{Attempt: 2},
			want: cells{"queued": noChange, "starting": noChange, "running": "running", "running-released": "running",
				"interrupted-child-running": "interrupted", "interrupted-child-stopped": "interrupted", "*": noChange},
		},
		{
			ev:   model.Retrying{By: holder, Error: "try again"},
			want: cells{"running": "running", "interrupted-child-running": "interrupted", "*": notHolder},
			fields: func(b, a *model.Row) error {
				if a.Worker != "" || a.Handoffs != b.Handoffs || a.Error != "try again" {
					return fmt.Errorf("worker %q handoffs %d error %q", a.Worker, a.Handoffs, a.Error)
				}
				return nil
			},
		},
		{
			ev: model.Ended{Status: events.StatusCompleted, Summary: "done", Output: json.RawMessage(`1`)},
			want: cells{"queued": "completed", "starting": "completed", "running": "completed", "running-released": "completed",
				"interrupted-child-running": "completed", "interrupted-child-stopped": "completed", "*": noChange},
			fields: func(b, a *model.Row) error {
				if a.Summary != "done" || string(a.Output) != "1" || !a.FinishOwed(events.StatusCompleted) {
					return fmt.Errorf("summary %q output %s, completed owed %v", a.Summary, a.Output, a.FinishOwed(events.StatusCompleted))
				}
				return nil
			},
		},
		{
			ev:   model.Ended{By: holder, Status: events.StatusError, Reason: events.ReasonHandlerError, Error: "boom"},
			want: cells{"running": "error", "interrupted-child-running": "error", "*": notHolder},
		},
		{
			ev:   model.Ended{Status: events.StatusInterrupted},
			want: cells{"*": notAllowed},
		},
		{
			ev:   model.Interrupted{By: holder, Reason: events.ReasonBudgetExceeded, Error: "over"},
			want: cells{"running": "interrupted", "interrupted-child-running": "interrupted", "*": notHolder},
			fields: func(b, a *model.Row) error {
				if a.ChildStillRunning || a.Reason != events.ReasonBudgetExceeded || a.Finishes[events.StatusInterrupted] == nil {
					return fmt.Errorf("childStillRunning %v reason %q", a.ChildStillRunning, a.Reason)
				}
				return nil
			},
		},
		{
			ev:   model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over", Held: true},
			want: cells{"starting": "interrupted", "running": "interrupted", "running-released": "interrupted", "*": noChange},
			fields: func(b, a *model.Row) error {
				if a.ChildStillRunning != (b.Worker != "") || !a.CancelRequested || !a.Teardown || a.CancelCascades() {
					return fmt.Errorf("childStillRunning %v cancel %v teardown %v", a.ChildStillRunning, a.CancelRequested, a.Teardown)
				}
				return nil
			},
		},
		{
			ev: model.BudgetStopped{Overrun: overBy, Held: true},
			want: cells{"queued": "interrupted", "starting": "interrupted", "running": "interrupted",
				"running-released": "interrupted", "*": noChange},
			fields: func(b, a *model.Row) error {
				if a.Overrun == nil || a.Reason != events.ReasonBudgetExceeded || a.ChildStillRunning != (b.Worker != "") {
					return fmt.Errorf("overrun %v reason %q childStillRunning %v", a.Overrun, a.Reason, a.ChildStillRunning)
				}
				return nil
			},
		},
		{
			ev:   model.ChildStopped{},
			want: cells{"interrupted-child-running": "interrupted", "*": noChange},
		},
		{
			ev:   model.ChildStopped{By: holder},
			want: cells{"interrupted-child-running": "interrupted", "running": noChange, "*": notHolder},
		},
		{
			ev: model.CancelRequested{Reason: "user", Held: true},
			want: cells{"queued": "aborted", "starting": "aborted", "running": "running", "running-released": "aborted",
				"interrupted-child-running": "interrupted", "interrupted-child-stopped": "interrupted", "*": noChange},
			fields: func(b, a *model.Row) error {
				if !a.CancelRequested || a.CancelReason != "user" || a.Teardown {
					return fmt.Errorf("cancel %v reason %q teardown %v", a.CancelRequested, a.CancelReason, a.Teardown)
				}
				return nil
			},
		},
		{
			ev: model.CancelRequested{Reason: "user", Held: false},
			want: cells{"queued": "aborted", "starting": "aborted", "running": "aborted", "running-released": "aborted",
				"interrupted-child-running": "interrupted", "interrupted-child-stopped": "interrupted", "*": noChange},
		},
		{
			ev:   model.Resumed{},
			want: cells{"interrupted-child-stopped": "starting", "*": noChange},
			fields: func(b, a *model.Row) error {
				if !a.ReadyAt.Equal(t0) || a.DispatchSeq != 0 || a.CancelRequested || a.Handoffs != 1 ||
					!a.Finishes[events.StatusInterrupted].Resumed {
					return fmt.Errorf("readyAt %v dispatchSeq %d cancel %v handoffs %d", a.ReadyAt, a.DispatchSeq, a.CancelRequested, a.Handoffs)
				}
				return nil
			},
		},
		{
			ev:   model.Resumed{Queued: true},
			want: cells{"*": noChange}, // the fixtures that may resume have no key
		},
		{
			ev:   model.Queued{NotBefore: t0.Add(time.Minute)},
			want: cells{"*": notAllowed}, // only a new keyed run: see TestQueuedAndPromoted
		},
		{
			ev:   model.Promoted{Merged: []string{"m1"}, Input: json.RawMessage(`[1,2]`), DispatchSeq: 11},
			want: cells{"queued": "starting", "*": noChange},
			fields: func(b, a *model.Row) error {
				if !a.ReadyAt.Equal(t0) || a.DispatchSeq != 11 || len(a.Merged) != 1 || string(a.Input) != "[1,2]" {
					return fmt.Errorf("readyAt %v dispatchSeq %d merged %v input %s", a.ReadyAt, a.DispatchSeq, a.Merged, a.Input)
				}
				return nil
			},
		},
		{
			ev:   model.Superseded{By: "newer"},
			want: cells{"queued": "aborted", "*": noChange},
		},
		{
			ev:   model.Merged{Into: "carrier"},
			want: cells{"queued": "aborted", "*": noChange},
		},
		{
			ev:   model.DispatchRecorded{Seq: 12, Replace: true},
			want: cells{"starting": "starting", "*": noChange},
		},
		{
			ev:   model.DispatchRecorded{Seq: 12},
			want: cells{"queued": "queued", "*": noChange}, // the others know theirs; a final one is left
		},
		{
			ev:   model.Redispatched{Lost: 7, Seq: 12},
			want: cells{"running": "running", "running-released": "running", "interrupted-child-running": "interrupted", "interrupted-child-stopped": "interrupted", "*": noChange},
		},
		{
			ev:   model.WaitingForWorker{Why: "nobody serves a"},
			want: cells{"starting": "starting", "*": noChange},
		},
		{
			ev:   model.Waiting{By: holder, Name: "approve"},
			want: cells{"running": "running", "interrupted-child-running": "interrupted", "*": notHolder},
		},
		{
			ev:   model.Synced{By: holder, Chunks: 3, Milestones: 1, LastMilestone: "m", LastSignalAt: t0},
			want: cells{"running": "running", "interrupted-child-running": "interrupted", "*": notHolder},
			fields: func(b, a *model.Row) error {
				if a.Chunks != 3 || a.Milestones != 1 || !a.LastSignalAt.Equal(t0) {
					return fmt.Errorf("chunks %d milestones %d lastSignalAt %v", a.Chunks, a.Milestones, a.LastSignalAt)
				}
				return nil
			},
		},
		{
			ev: model.FinalRepaired{Event: repaired},
			want: cells{"queued": "completed", "starting": "completed", "running": "completed", "running-released": "completed",
				"interrupted-child-running": "completed", "interrupted-child-stopped": "completed", "completed": noChange,
				"error": "completed", "aborted": "completed"},
		},
		{
			ev:   model.FinalRepaired{Event: events.StatusEvent{Status: events.StatusRunning}},
			want: cells{"*": notAllowed},
		},
		// The ledger and usage marks never change a status.
		{ev: model.FinishClaimed{Status: events.StatusCompleted, By: "d", Until: t0.Add(time.Minute)}, want: cells{"*": "same"}},
		{ev: model.FinishDelivered{Status: events.StatusInterrupted}, want: cells{"*": "same"}},
		{
			ev:   model.FinishReleased{Status: events.StatusInterrupted, Cause: "boom"},
			want: cells{"interrupted-child-running": "interrupted", "interrupted-child-stopped": "interrupted", "*": noChange},
		},
		{
			ev:   model.FinishSeqRecorded{Status: events.StatusInterrupted, Seq: 3},
			want: cells{"interrupted-child-running": "interrupted", "interrupted-child-stopped": "interrupted", "*": noChange},
		},
		{
			ev:   model.FinishUnserved{Status: events.StatusInterrupted},
			want: cells{"interrupted-child-running": "interrupted", "interrupted-child-stopped": "interrupted", "*": noChange},
		},
		{
			ev:   model.UnservedFinishFailed{Status: events.StatusInterrupted, Reason: "nobody"},
			want: cells{"interrupted-child-running": "interrupted", "interrupted-child-stopped": "interrupted", "*": noChange},
		},
		{ev: model.NoticeOwed{Milestone: milestone}, want: cells{"*": noChange}}, // the fixtures ask for no notices
		{ev: model.NoticeClaimed{Name: "m", By: "d"}, want: cells{"*": noChange}},
		{ev: model.NoticeDelivered{Name: "m"}, want: cells{"*": noChange}},
		{ev: model.NoticeReleased{Name: "m", Cause: "boom"}, want: cells{"*": noChange}},
		{ev: model.NoticeSeqRecorded{Name: "m", Seq: 3}, want: cells{"*": noChange}},
		{ev: model.Charged{Mark: model.ChargeMark{Run: "c", Attempt: 1, Seq: 1}, Delta: jetruntype.UsageTotals{InputTokens: 5}}, want: cells{"*": "same"}},
		{ev: model.RunCounted{}, want: cells{"*": "same"}},
		{ev: model.Reserved{Hold: model.Hold{ID: "c.1.1", Run: "c", Attempt: 1, Amount: jetruntype.UsageTotals{InputTokens: 5}, Until: t0.Add(time.Minute)}}, want: cells{"*": "same"}},
		{ev: model.HoldsReleased{Run: "c", Attempt: 1}, want: cells{"*": noChange}},
		{ev: model.HoldsRenewed{Run: "c", Attempt: 1, Until: t0.Add(time.Minute)}, want: cells{"*": noChange}},
		{
			ev:   model.StepsCounted{Stored: jetruntype.Usage{UsageTotals: jetruntype.UsageTotals{InputTokens: 5}}},
			want: cells{"running": noChange, "interrupted-child-running": noChange, "*": "same"},
		},
	} {
		for _, fx := range fixtures() {
			want, ok := tc.want[fx.name]
			if !ok {
				want = tc.want["*"]
			}
			if want == "same" {
				want = string(fx.row.Status)
			}
			t.Run(fmt.Sprintf("%T/%s", tc.ev, fx.name), func(t *testing.T) {
				before := fx.row.Clone()
				if err := model.Check(before); err != nil {
					t.Fatalf("fixture: %v", err)
				}
				after := before.Clone()
				err := model.Apply(after, tc.ev, t0)
				if got := outcome(err, after); got != want {
					t.Fatalf("%+v on %s: %s (err %v), want %s", tc.ev, fx.name, got, err, want)
				}
				if err != nil {
					if !reflect.DeepEqual(after, before) {
						t.Fatalf("the row changed with %v:\n%+v\nwas\n%+v", err, after, before)
					}
					return
				}
				if err := model.Check(after); err != nil {
					t.Fatalf("after %+v: %v", tc.ev, err)
				}
				if tc.fields != nil {
					if err := tc.fields(before, after); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// outcome names what Apply did: an error's kind, or the row's status.
func outcome(err error, r *model.Row) string {
	var te *model.TransitionError
	var oe *model.OverrunError
	switch {
	case err == nil:
		return string(r.Status)
	case errors.Is(err, model.ErrNoChange):
		return noChange
	case errors.As(err, &te) && errors.Is(err, model.ErrNotHolder):
		return notHolder
	case errors.As(err, &te) && errors.Is(err, model.ErrNotAllowed):
		return notAllowed
	case errors.As(err, &oe):
		return overrun
	}
	return "error: " + err.Error()
}

// A keyed run is queued while new, and promoted from its key's queue;
// Queued's table cells are all refusals since no fixture is a new keyed
// run.
func TestQueuedAndPromoted(t *testing.T) {
	d := events.Dispatch{RunID: "r", ConcurrencyKey: "k", Strategy: events.StrategyDebounce}
	r := model.NewRun("a", d, 4, t0.Add(-time.Hour))
	if err := model.Apply(r, model.Queued{NotBefore: t0, SubmitSeq: 4}, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r.Status != events.StatusQueued || !r.NotBefore.Equal(t0) || r.SubmitSeq != 4 || r.Unindexed {
		t.Fatalf("queued: %+v", r)
	}
	if err := model.Check(r); err != nil {
		t.Fatal(err)
	}
	if err := model.Apply(r, model.Promoted{}, t0); err != nil {
		t.Fatal(err)
	}
	if r.Status != events.StatusStarting || !r.ReadyAt.Equal(t0) || !r.NotBefore.IsZero() || r.DispatchSeq != 4 {
		t.Fatalf("promoted: %+v", r)
	}
	if err := model.Check(r); err != nil {
		t.Fatal(err)
	}
	plain := model.NewRun("a", events.Dispatch{RunID: "p"}, 1, t0)
	if err := model.Apply(plain, model.Queued{}, t0); !errors.Is(err, model.ErrNotAllowed) {
		t.Fatalf("a run without a key queued: %v", err)
	}
}

// Apply with several events writes once: ErrNoChange only when none of
// them changed anything.
func TestApplyAll(t *testing.T) {
	r := &model.Row{ID: "r", Status: events.StatusCompleted, CreatedAt: t0, FinishedAt: t0}
	if err := model.ApplyAll(r, t0, model.CancelRequested{Reason: "x"}, model.Blinked{Attempt: 1}); !errors.Is(err, model.ErrNoChange) {
		t.Fatalf("nothing to do: %v", err)
	}
	if err := model.ApplyAll(r, t0, model.CancelRequested{Reason: "x"}, model.RunCounted{}); err != nil || r.TreeRuns != 1 {
		t.Fatalf("one change: %v, treeRuns %d", err, r.TreeRuns)
	}
}
