package jetruntype_test

import (
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// A give-up and the real result that replaces it are both owed, delivered
// in the order they happened, each once; a claim keeps other deliverers
// off until it expires or is released.
func TestFinishLedger(t *testing.T) {
	now := time.Now()
	r := &jetruntype.Run{ID: "r", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	r.Interrupt(events.ReasonBudgetExceeded, "over budget", true, now)
	r.End(events.StatusCompleted, "", "", now.Add(time.Second))
	if got := r.PendingFinishes(); len(got) != 2 || got[0] != events.StatusInterrupted {
		t.Fatalf("pending = %v, want interrupted then completed", got)
	}
	if check, _ := r.CheckFinish(events.StatusCompleted, now); check != jetruntype.DeliveryLater {
		t.Fatalf("completed before interrupted was delivered: %v", check)
	}
	if check, _ := r.CheckFinish(events.StatusInterrupted, now); check != jetruntype.DeliverNow {
		t.Fatalf("interrupted: %v, want DeliverNow", check)
	}
	until := now.Add(10 * time.Second)
	if n := r.ClaimFinish(events.StatusInterrupted, events.Finish{}, "d1", until, now); n != 1 {
		t.Fatalf("first claim is attempt %d", n)
	}
	if check, wait := r.CheckFinish(events.StatusInterrupted, now); check != jetruntype.DeliveryLater || wait != 10*time.Second {
		t.Fatalf("claimed finish: %v after %v, want later after 10s", check, wait)
	}
	if err := r.ReleaseFinish(events.StatusInterrupted, "boom", false, now); err != nil {
		t.Fatal(err)
	}
	if fs := r.Finishes[events.StatusInterrupted]; fs.LastError != "boom" || !fs.ClaimedUntil.IsZero() {
		t.Fatalf("released = %+v", fs)
	}
	if n := r.ClaimFinish(events.StatusInterrupted, events.Finish{}, "d2", until, now); n != 2 {
		t.Fatalf("second claim is attempt %d", n)
	}
	if due := r.FinishDelivered(events.StatusInterrupted, now); !due.Equal(now) {
		t.Fatalf("due = %v, want %v", due, now)
	}
	if check, _ := r.CheckFinish(events.StatusInterrupted, now); check != jetruntype.DeliveryDone {
		t.Fatalf("delivered finish: %v, want done", check)
	}
	if check, _ := r.CheckFinish(events.StatusCompleted, now); check != jetruntype.DeliverNow {
		t.Fatalf("completed after interrupted was delivered: %v", check)
	}
	if err := r.ReleaseFinish(events.StatusAborted, "x", true, now); err != jetruntype.ErrNoChange {
		t.Fatalf("release of a finish never owed = %v", err)
	}
}

// The reconciler marks and dead-letters only a finish no deliverer took.
func TestUnservedFinishLedger(t *testing.T) {
	now := time.Now()
	r := &jetruntype.Run{ID: "r", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	r.End(events.StatusCompleted, "", "", now)
	if err := r.MarkFinishUnserved(events.StatusCompleted, now); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkFinishUnserved(events.StatusCompleted, now); err != jetruntype.ErrNoChange {
		t.Fatalf("second mark = %v", err)
	}
	r.ClaimFinish(events.StatusCompleted, events.Finish{}, "d", now.Add(time.Minute), now)
	if !r.Finishes[events.StatusCompleted].UnservedSince.IsZero() {
		t.Fatal("a claim did not clear unservedSince")
	}
	if err := r.FailUnservedFinish(events.StatusCompleted, "nobody", now); err != jetruntype.ErrNoChange {
		t.Fatalf("dead-lettered a finish a deliverer took: %v", err)
	}
	r2 := &jetruntype.Run{ID: "r2", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	r2.End(events.StatusError, "", "e", now)
	if err := r2.FailUnservedFinish(events.StatusError, "nobody", now); err != nil {
		t.Fatal(err)
	}
	if r2.FinishOwed(events.StatusError) {
		t.Fatal("a dead-lettered finish is still owed")
	}
}

// A notice is owed for the first milestone of each listed name.
func TestNoticeLedger(t *testing.T) {
	now := time.Now()
	r := &jetruntype.Run{ID: "r", Detached: &events.Detached{OnFinish: "h", OnMilestones: []string{"plan"}}}
	if err := r.OweNotice(events.Milestone{Name: "other", Sequence: 1}, now); err != jetruntype.ErrNoChange {
		t.Fatalf("an unlisted milestone = %v", err)
	}
	if err := r.OweNotice(events.Milestone{Name: "plan", Sequence: 2}, now); err != nil {
		t.Fatal(err)
	}
	if check, _ := r.CheckNotice("plan", now); check != jetruntype.DeliverNow {
		t.Fatalf("owed notice: %v", check)
	}
	if n := r.ClaimNotice("plan", "d", now.Add(time.Minute)); n != 1 {
		t.Fatalf("claim = attempt %d", n)
	}
	if check, _ := r.CheckNotice("plan", now); check != jetruntype.DeliveryLater {
		t.Fatalf("claimed notice: %v", check)
	}
	if err := r.NoticeDelivered("plan", now); err != nil {
		t.Fatal(err)
	}
	if check, _ := r.CheckNotice("plan", now); check != jetruntype.DeliveryDone {
		t.Fatalf("delivered notice: %v", check)
	}
	if err := r.RecordNoticeSeq("plan", 7); err != jetruntype.ErrNoChange {
		t.Fatalf("seq recorded on a delivered notice: %v", err)
	}
}

// A run given up, resumed and given up again owes its handler the second
// give-up too, under its own ending; a copy of the first is then stale.
// Interrupting again without a resume owes nothing new.
func TestASecondGiveUpAfterAResumeIsOwed(t *testing.T) {
	now := time.Now()
	r := &jetruntype.Run{ID: "r", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	r.Interrupt(events.ReasonBudgetExceeded, "over budget", false, now)
	first, _ := r.FinishMessage(events.StatusInterrupted)
	r.FinishDelivered(events.StatusInterrupted, now)
	r.Interrupt(events.ReasonNoProgress, "again, no resume", false, now)
	if r.FinishOwed(events.StatusInterrupted) {
		t.Fatal("an interrupt without a resume owes a second finish")
	}

	r.Resume()
	r.Status = events.StatusRunning
	r.Interrupt(events.ReasonBudgetExceeded, "over budget again", false, now.Add(time.Second))
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
	if check, _ := r.CheckFinish(events.StatusInterrupted, now); check != jetruntype.DeliverNow {
		t.Fatalf("second finish: %v, want DeliverNow", check)
	}
}
