package model_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// A give-up and the real result that replaces it are both owed, delivered
// in the order they happened, each once; a claim keeps other deliverers
// off until it expires or is released.
func TestFinishLedger(t *testing.T) {
	now := time.Now()
	r := &model.Row{ID: "r", Status: events.StatusRunning, Worker: "w", Attempt: 1, Detached: &events.Detached{OnFinish: "h"}}
	must(t, r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over budget", Held: true})
	must(t, r, now.Add(time.Second), model.Ended{Status: events.StatusCompleted})
	if got := r.PendingFinishes(); len(got) != 2 || got[0] != events.StatusInterrupted {
		t.Fatalf("pending = %v, want interrupted then completed", got)
	}
	if check, _ := r.CheckFinish(events.StatusCompleted, now); check != model.DeliveryLater {
		t.Fatalf("completed before interrupted was delivered: %v", check)
	}
	if check, _ := r.CheckFinish(events.StatusInterrupted, now); check != model.DeliverNow {
		t.Fatalf("interrupted: %v, want DeliverNow", check)
	}
	until := now.Add(10 * time.Second)
	claim := func(by string) int {
		must(t, r, now, model.FinishClaimed{Status: events.StatusInterrupted, By: by, Until: until})
		return r.Finishes[events.StatusInterrupted].Attempts
	}
	if n := claim("d1"); n != 1 {
		t.Fatalf("first claim is attempt %d", n)
	}
	if check, wait := r.CheckFinish(events.StatusInterrupted, now); check != model.DeliveryLater || wait != 10*time.Second {
		t.Fatalf("claimed finish: %v after %v, want later after 10s", check, wait)
	}
	must(t, r, now, model.FinishReleased{Status: events.StatusInterrupted, Cause: "boom"})
	if fs := r.Finishes[events.StatusInterrupted]; fs.LastError != "boom" || !fs.ClaimedUntil.IsZero() {
		t.Fatalf("released = %+v", fs)
	}
	if n := claim("d2"); n != 2 {
		t.Fatalf("second claim is attempt %d", n)
	}
	must(t, r, now, model.FinishDelivered{Status: events.StatusInterrupted})
	if due := r.Finishes[events.StatusInterrupted].DueAt; !due.Equal(now) || r.Delivered[events.StatusInterrupted].IsZero() {
		t.Fatalf("due = %v, want %v; delivered %v", due, now, r.Delivered)
	}
	if check, _ := r.CheckFinish(events.StatusInterrupted, now); check != model.DeliveryDone {
		t.Fatalf("delivered finish: %v, want done", check)
	}
	if check, _ := r.CheckFinish(events.StatusCompleted, now); check != model.DeliverNow {
		t.Fatalf("completed after interrupted was delivered: %v", check)
	}
	if err := model.Apply(r, model.FinishReleased{Status: events.StatusAborted, Cause: "x", Failed: true}, now); err != model.ErrNoChange {
		t.Fatalf("release of a finish never owed = %v", err)
	}
}

// The reconciler marks and dead-letters only a finish no deliverer took.
func TestUnservedFinishLedger(t *testing.T) {
	now := time.Now()
	r := &model.Row{ID: "r", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	must(t, r, now, model.Ended{Status: events.StatusCompleted}, model.FinishUnserved{Status: events.StatusCompleted})
	if err := model.Apply(r, model.FinishUnserved{Status: events.StatusCompleted}, now); err != model.ErrNoChange {
		t.Fatalf("second mark = %v", err)
	}
	must(t, r, now, model.FinishClaimed{Status: events.StatusCompleted, By: "d", Until: now.Add(time.Minute)})
	if !r.Finishes[events.StatusCompleted].UnservedSince.IsZero() {
		t.Fatal("a claim did not clear unservedSince")
	}
	if err := model.Apply(r, model.UnservedFinishFailed{Status: events.StatusCompleted, Reason: "nobody"}, now); err != model.ErrNoChange {
		t.Fatalf("dead-lettered a finish a deliverer took: %v", err)
	}
	r2 := &model.Row{ID: "r2", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	must(t, r2, now, model.Ended{Status: events.StatusError, Error: "e"},
		model.UnservedFinishFailed{Status: events.StatusError, Reason: "nobody"})
	if r2.FinishOwed(events.StatusError) {
		t.Fatal("a dead-lettered finish is still owed")
	}
}

// A notice is owed for the first milestone of each listed name.
func TestNoticeLedger(t *testing.T) {
	now := time.Now()
	r := &model.Row{ID: "r", Detached: &events.Detached{OnFinish: "h", OnMilestones: []string{"plan"}}}
	if err := model.Apply(r, model.NoticeOwed{Milestone: events.Milestone{Name: "other", Sequence: 1}}, now); err != model.ErrNoChange {
		t.Fatalf("an unlisted milestone = %v", err)
	}
	must(t, r, now, model.NoticeOwed{Milestone: events.Milestone{Name: "plan", Sequence: 2}})
	if check, _ := r.CheckNotice("plan", now); check != model.DeliverNow {
		t.Fatalf("owed notice: %v", check)
	}
	if must(t, r, now, model.NoticeClaimed{Name: "plan", By: "d", Until: now.Add(time.Minute)}); r.Notices["plan"].Attempts != 1 {
		t.Fatalf("claim = attempt %d", r.Notices["plan"].Attempts)
	}
	if check, _ := r.CheckNotice("plan", now); check != model.DeliveryLater {
		t.Fatalf("claimed notice: %v", check)
	}
	must(t, r, now, model.NoticeDelivered{Name: "plan"})
	if check, _ := r.CheckNotice("plan", now); check != model.DeliveryDone {
		t.Fatalf("delivered notice: %v", check)
	}
	if err := model.Apply(r, model.NoticeSeqRecorded{Name: "plan", Seq: 7}, now); err != model.ErrNoChange {
		t.Fatalf("seq recorded on a delivered notice: %v", err)
	}
}

// A run given up, resumed and given up again owes its handler the second
// give-up too, under its own ending; a copy of the first is then stale.
// Interrupting again without a resume owes nothing new.
func TestASecondGiveUpAfterAResumeIsOwed(t *testing.T) {
	now := time.Now()
	r := &model.Row{ID: "r", Status: events.StatusRunning, Worker: "w", Attempt: 1, Detached: &events.Detached{OnFinish: "h"}}
	must(t, r, now, model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over budget", Held: true})
	first, _ := r.FinishMessage(events.StatusInterrupted)
	must(t, r, now, model.FinishDelivered{Status: events.StatusInterrupted},
		model.Interrupted{Reason: events.ReasonNoProgress, Error: "again, no resume"})
	if r.FinishOwed(events.StatusInterrupted) {
		t.Fatal("an interrupt without a resume owes a second finish")
	}

	must(t, r, now, model.Resumed{}, model.Claimed{Worker: "w", Epoch: "e"})
	must(t, r, now.Add(time.Second), model.GaveUp{Reason: events.ReasonBudgetExceeded, Error: "over budget again"})
	if !r.FinishOwed(events.StatusInterrupted) {
		t.Fatal("the second give-up owes no finish")
	}
	second, ok := r.FinishMessage(events.StatusInterrupted)
	if !ok || second.Ending != 1 || second.Error != "over budget again" {
		t.Fatalf("second finish %+v", second)
	}
	if got := wire.FinishMsgID(r.ID, second.Status, second.Ending); got != "r.interrupted.2" {
		t.Fatalf("second finish id %s", got)
	}
	if got := wire.FinishMsgID(r.ID, first.Status, first.Ending); got != "r.interrupted" {
		t.Fatalf("first finish id %s", got)
	}
	if !r.StaleFinish(first) || r.StaleFinish(second) {
		t.Fatal("stale: want the first's copy only")
	}
	if check, _ := r.CheckFinish(events.StatusInterrupted, now); check != model.DeliverNow {
		t.Fatalf("second finish: %v, want DeliverNow", check)
	}
}

// must applies evs to r in order at now, each of which must change r.
func must(t *testing.T, r *model.Row, now time.Time, evs ...model.Event) {
	t.Helper()
	if err := do(r, now, evs...); err != nil {
		t.Fatal(err)
	}
}

// TestAttemptPredicates: a deliverer's decisions on the attempt it claimed
// — is it the last of the limit, how long to wait after it fails — are the
// slot's, the same for a finish and a notice, claim by claim.
func TestAttemptPredicates(t *testing.T) {
	const limit, base, ceiling = 3, time.Second, 5 * time.Second
	for _, tc := range []struct {
		claims    int
		wantSpent bool
		wantWait  time.Duration
	}{
		{0, false, time.Second}, // nothing claimed: the first wait
		{1, false, time.Second},
		{2, false, 2 * time.Second},
		{3, true, 4 * time.Second},  // the limit: the attempt under way is the last
		{4, true, 5 * time.Second},  // past it (a lower limit configured later): still the last; the ceiling
		{40, true, 5 * time.Second}, // the doubling stops, no overflow
	} {
		r := &model.Row{ID: "r", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h", OnMilestones: []string{"plan"}}}
		must(t, r, t0, model.Ended{Status: events.StatusCompleted}, model.NoticeOwed{Milestone: events.Milestone{Name: "plan", Sequence: 1}})
		for range tc.claims {
			must(t, r, t0, model.FinishClaimed{Status: events.StatusCompleted, By: "d", Until: t0.Add(time.Minute)},
				model.NoticeClaimed{Name: "plan", By: "d", Until: t0.Add(time.Minute)})
		}
		row := r
		got := []any{row.FinishAttempts(events.StatusCompleted), row.FinishSpent(events.StatusCompleted, limit), row.FinishBackoff(events.StatusCompleted, base, ceiling)}
		if want := []any{tc.claims, tc.wantSpent, tc.wantWait}; !reflect.DeepEqual(got, want) {
			t.Errorf("finish after %d claims: attempts, spent, backoff = %v, want %v", tc.claims, got, want)
		}
		got = []any{row.NoticeAttempts("plan"), row.NoticeSpent("plan", limit), row.NoticeBackoff("plan", base, ceiling)}
		if want := []any{tc.claims, tc.wantSpent, tc.wantWait}; !reflect.DeepEqual(got, want) {
			t.Errorf("notice after %d claims: attempts, spent, backoff = %v, want %v", tc.claims, got, want)
		}
	}
	// A slot the row does not record was never claimed.
	none := &model.Row{ID: "r"}
	if none.FinishAttempts(events.StatusCompleted) != 0 || none.FinishSpent(events.StatusCompleted, limit) ||
		none.NoticeAttempts("plan") != 0 || none.NoticeSpent("plan", limit) {
		t.Error("a slot the row does not record counts attempts")
	}
}

// TestNoticeCopyAt: a deliverer records where a notice's copy waits only
// when the row does not record it there already: NoticeSeqRecorded would
// change nothing.
func TestNoticeCopyAt(t *testing.T) {
	owed := func(seq uint64) *model.Row {
		r := &model.Row{ID: "r", Detached: &events.Detached{OnFinish: "h", OnMilestones: []string{"plan"}}}
		must(t, r, t0, model.NoticeOwed{Milestone: events.Milestone{Name: "plan", Sequence: 1}})
		if seq != 0 {
			must(t, r, t0, model.NoticeSeqRecorded{Name: "plan", Seq: seq})
		}
		return r
	}
	for _, tc := range []struct {
		name      string
		row       *model.Row
		milestone string
		seq       uint64
		want      bool
		records   bool // NoticeSeqRecorded changes the row
	}{
		{"recorded there", owed(7), "plan", 7, true, false},
		{"recorded elsewhere", owed(7), "plan", 8, false, true},
		{"none recorded", owed(0), "plan", 7, false, true},
		{"no notice of the name", owed(7), "other", 7, false, false},
	} {
		if got := tc.row.NoticeCopyAt(tc.milestone, tc.seq); got != tc.want {
			t.Errorf("%s: NoticeCopyAt(%s, %d) = %v, want %v", tc.name, tc.milestone, tc.seq, got, tc.want)
		}
		if got := model.Apply(tc.row, model.NoticeSeqRecorded{Name: tc.milestone, Seq: tc.seq}, t0) == nil; got != tc.records {
			t.Errorf("%s: NoticeSeqRecorded changed the row: %v, want %v", tc.name, got, tc.records)
		}
	}
}
