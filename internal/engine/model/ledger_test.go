package model_test

import (
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
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
	model.Of(r).Interrupt(events.ReasonBudgetExceeded, "over budget", true, now)
	model.Of(r).End(events.StatusCompleted, "", "", now.Add(time.Second))
	if got := model.Of(r).PendingFinishes(); len(got) != 2 || got[0] != events.StatusInterrupted {
		t.Fatalf("pending = %v, want interrupted then completed", got)
	}
	if check, _ := model.Of(r).CheckFinish(events.StatusCompleted, now); check != model.DeliveryLater {
		t.Fatalf("completed before interrupted was delivered: %v", check)
	}
	if check, _ := model.Of(r).CheckFinish(events.StatusInterrupted, now); check != model.DeliverNow {
		t.Fatalf("interrupted: %v, want DeliverNow", check)
	}
	until := now.Add(10 * time.Second)
	if n := model.Of(r).ClaimFinish(events.StatusInterrupted, events.Finish{}, "d1", until, now); n != 1 {
		t.Fatalf("first claim is attempt %d", n)
	}
	if check, wait := model.Of(r).CheckFinish(events.StatusInterrupted, now); check != model.DeliveryLater || wait != 10*time.Second {
		t.Fatalf("claimed finish: %v after %v, want later after 10s", check, wait)
	}
	if err := model.Of(r).ReleaseFinish(events.StatusInterrupted, "boom", false, now); err != nil {
		t.Fatal(err)
	}
	if fs := r.Finishes[events.StatusInterrupted]; fs.LastError != "boom" || !fs.ClaimedUntil.IsZero() {
		t.Fatalf("released = %+v", fs)
	}
	if n := model.Of(r).ClaimFinish(events.StatusInterrupted, events.Finish{}, "d2", until, now); n != 2 {
		t.Fatalf("second claim is attempt %d", n)
	}
	if due := model.Of(r).FinishDelivered(events.StatusInterrupted, now); !due.Equal(now) {
		t.Fatalf("due = %v, want %v", due, now)
	}
	if check, _ := model.Of(r).CheckFinish(events.StatusInterrupted, now); check != model.DeliveryDone {
		t.Fatalf("delivered finish: %v, want done", check)
	}
	if check, _ := model.Of(r).CheckFinish(events.StatusCompleted, now); check != model.DeliverNow {
		t.Fatalf("completed after interrupted was delivered: %v", check)
	}
	if err := model.Of(r).ReleaseFinish(events.StatusAborted, "x", true, now); err != model.ErrNoChange {
		t.Fatalf("release of a finish never owed = %v", err)
	}
}

// The reconciler marks and dead-letters only a finish no deliverer took.
func TestUnservedFinishLedger(t *testing.T) {
	now := time.Now()
	r := &jetruntype.Run{ID: "r", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	model.Of(r).End(events.StatusCompleted, "", "", now)
	if err := model.Of(r).MarkFinishUnserved(events.StatusCompleted, now); err != nil {
		t.Fatal(err)
	}
	if err := model.Of(r).MarkFinishUnserved(events.StatusCompleted, now); err != model.ErrNoChange {
		t.Fatalf("second mark = %v", err)
	}
	model.Of(r).ClaimFinish(events.StatusCompleted, events.Finish{}, "d", now.Add(time.Minute), now)
	if !r.Finishes[events.StatusCompleted].UnservedSince.IsZero() {
		t.Fatal("a claim did not clear unservedSince")
	}
	if err := model.Of(r).FailUnservedFinish(events.StatusCompleted, "nobody", now); err != model.ErrNoChange {
		t.Fatalf("dead-lettered a finish a deliverer took: %v", err)
	}
	r2 := &jetruntype.Run{ID: "r2", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	model.Of(r2).End(events.StatusError, "", "e", now)
	if err := model.Of(r2).FailUnservedFinish(events.StatusError, "nobody", now); err != nil {
		t.Fatal(err)
	}
	if model.Of(r2).FinishOwed(events.StatusError) {
		t.Fatal("a dead-lettered finish is still owed")
	}
}

// A notice is owed for the first milestone of each listed name.
func TestNoticeLedger(t *testing.T) {
	now := time.Now()
	r := &jetruntype.Run{ID: "r", Detached: &events.Detached{OnFinish: "h", OnMilestones: []string{"plan"}}}
	if err := model.Of(r).OweNotice(events.Milestone{Name: "other", Sequence: 1}, now); err != model.ErrNoChange {
		t.Fatalf("an unlisted milestone = %v", err)
	}
	if err := model.Of(r).OweNotice(events.Milestone{Name: "plan", Sequence: 2}, now); err != nil {
		t.Fatal(err)
	}
	if check, _ := model.Of(r).CheckNotice("plan", now); check != model.DeliverNow {
		t.Fatalf("owed notice: %v", check)
	}
	if n := model.Of(r).ClaimNotice("plan", "d", now.Add(time.Minute)); n != 1 {
		t.Fatalf("claim = attempt %d", n)
	}
	if check, _ := model.Of(r).CheckNotice("plan", now); check != model.DeliveryLater {
		t.Fatalf("claimed notice: %v", check)
	}
	if err := model.Of(r).NoticeDelivered("plan", now); err != nil {
		t.Fatal(err)
	}
	if check, _ := model.Of(r).CheckNotice("plan", now); check != model.DeliveryDone {
		t.Fatalf("delivered notice: %v", check)
	}
	if err := model.Of(r).RecordNoticeSeq("plan", 7); err != model.ErrNoChange {
		t.Fatalf("seq recorded on a delivered notice: %v", err)
	}
}

// A run given up, resumed and given up again owes its handler the second
// give-up too, under its own ending; a copy of the first is then stale.
// Interrupting again without a resume owes nothing new.
func TestASecondGiveUpAfterAResumeIsOwed(t *testing.T) {
	now := time.Now()
	r := &jetruntype.Run{ID: "r", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	model.Of(r).Interrupt(events.ReasonBudgetExceeded, "over budget", false, now)
	first, _ := model.Of(r).FinishMessage(events.StatusInterrupted)
	model.Of(r).FinishDelivered(events.StatusInterrupted, now)
	model.Of(r).Interrupt(events.ReasonNoProgress, "again, no resume", false, now)
	if model.Of(r).FinishOwed(events.StatusInterrupted) {
		t.Fatal("an interrupt without a resume owes a second finish")
	}

	model.Of(r).Resume(time.Now())
	r.Status = events.StatusRunning
	model.Of(r).Interrupt(events.ReasonBudgetExceeded, "over budget again", false, now.Add(time.Second))
	if !model.Of(r).FinishOwed(events.StatusInterrupted) {
		t.Fatal("the second give-up owes no finish")
	}
	second, ok := model.Of(r).FinishMessage(events.StatusInterrupted)
	if !ok || second.Ending != 1 || second.Error != "over budget again" {
		t.Fatalf("second finish %+v", second)
	}
	if got := wire.FinishMsgID(r.ID, second.Status, second.Ending); got != "r.interrupted.2" {
		t.Fatalf("second finish id %s", got)
	}
	if got := wire.FinishMsgID(r.ID, first.Status, first.Ending); got != "r.interrupted" {
		t.Fatalf("first finish id %s", got)
	}
	if !model.Of(r).StaleFinish(first) || model.Of(r).StaleFinish(second) {
		t.Fatal("stale: want the first's copy only")
	}
	if check, _ := model.Of(r).CheckFinish(events.StatusInterrupted, now); check != model.DeliverNow {
		t.Fatalf("second finish: %v, want DeliverNow", check)
	}
}
