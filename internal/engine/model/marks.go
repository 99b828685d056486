package model

import (
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The events that mark a row's delivery ledger (ledger.go) and its usage
// and budgets (usage.go). They never change its status: a final row takes
// them too.

// FinishClaimed: deliverer By claims the finish for Status until Until (the
// slot's Attempts counts the attempt it starts). A finish no transition
// recorded (published by hand) gets a slot from Finish, due now.
type FinishClaimed struct {
	Status events.Status
	Finish events.Finish
	By     string
	Until  time.Time
}

func (ev FinishClaimed) apply(r *Row, now time.Time) error {
	r.claimFinish(ev.Status, ev.Finish, ev.By, ev.Until, now)
	return nil
}

// FinishDelivered: the finish for Status, its ending Ending, was delivered
// (the first delivery's time stays). ErrNoChange for a copy of an earlier
// ending (StaleFinish).
type FinishDelivered struct {
	Status events.Status
	Ending int
}

func (ev FinishDelivered) apply(r *Row, now time.Time) error {
	if r.StaleFinish(events.Finish{Status: ev.Status, Ending: ev.Ending}) {
		return ErrNoChange
	}
	r.finishDelivered(ev.Status, now)
	return nil
}

// FinishReleased: an attempt to deliver the finish for Status (its ending
// Ending) failed with Cause; with Failed, delivery is given up. ErrNoChange
// for a copy of an earlier ending, or a finish the row does not record.
type FinishReleased struct {
	Status events.Status
	Ending int
	Cause  string
	Failed bool
}

func (ev FinishReleased) apply(r *Row, now time.Time) error {
	if r.StaleFinish(events.Finish{Status: ev.Status, Ending: ev.Ending}) {
		return ErrNoChange
	}
	return r.releaseFinish(ev.Status, ev.Cause, ev.Failed, now)
}

// FinishSeqRecorded: the copy of the finish for Status waiting for a
// deliverer is at finish stream sequence Seq. ErrNoChange if it is not owed
// or recorded already.
type FinishSeqRecorded struct {
	Status events.Status
	Seq    uint64
}

func (ev FinishSeqRecorded) apply(r *Row, _ time.Time) error {
	return r.recordFinishSeq(ev.Status, ev.Seq)
}

// FinishUnserved: no deliverer follows the handler of the finish for
// Status, which no deliverer has taken. ErrNoChange if one did, or it is
// marked already.
type FinishUnserved struct{ Status events.Status }

func (ev FinishUnserved) apply(r *Row, now time.Time) error {
	return r.markFinishUnserved(ev.Status, now)
}

// UnservedFinishFailed: the finish for Status, which no deliverer took, is
// given up with Reason (dead-lettered). ErrNoChange if a deliverer took it
// after all.
type UnservedFinishFailed struct {
	Status events.Status
	Reason string
}

func (ev UnservedFinishFailed) apply(r *Row, now time.Time) error {
	return r.failUnservedFinish(ev.Status, ev.Reason, now)
}

// NoticeOwed: the run reached Milestone, whose name its finish handler
// asked to hear of: a notice is owed. ErrNoChange when the run does not ask
// for it or a notice of that name is recorded already (OweNotice).
type NoticeOwed struct{ Milestone events.Milestone }

func (ev NoticeOwed) apply(r *Row, now time.Time) error { return r.oweNotice(ev.Milestone, now) }

// NoticeClaimed: deliverer By claims the notice of milestone Name until
// Until (CheckNotice said DeliverNow).
type NoticeClaimed struct {
	Name  string
	By    string
	Until time.Time
}

func (ev NoticeClaimed) apply(r *Row, _ time.Time) error {
	if r.Notices[ev.Name] == nil {
		return ErrNoChange
	}
	r.claimNotice(ev.Name, ev.By, ev.Until)
	return nil
}

// NoticeDelivered: the notice of milestone Name was delivered. ErrNoChange
// if the row records no such notice.
type NoticeDelivered struct{ Name string }

func (ev NoticeDelivered) apply(r *Row, now time.Time) error { return r.noticeDelivered(ev.Name, now) }

// NoticeReleased: an attempt to deliver the notice of milestone Name failed
// with Cause; with Failed, delivery is given up. ErrNoChange if the row
// records no such notice.
type NoticeReleased struct {
	Name   string
	Cause  string
	Failed bool
}

func (ev NoticeReleased) apply(r *Row, now time.Time) error {
	return r.releaseNotice(ev.Name, ev.Cause, ev.Failed, now)
}

// NoticeSeqRecorded: the copy of the notice of milestone Name waiting for
// a deliverer is at finish stream sequence Seq. ErrNoChange if it is not
// owed or recorded already.
type NoticeSeqRecorded struct {
	Name string
	Seq  uint64
}

func (ev NoticeSeqRecorded) apply(r *Row, _ time.Time) error {
	return r.recordNoticeSeq(ev.Name, ev.Seq)
}

// SeqRecorded is the event recording that o's copy waiting for a
// deliverer is at finish stream sequence seq.
func (o Owed) SeqRecorded(seq uint64) Event {
	if o.Milestone != "" {
		return NoticeSeqRecorded{Name: o.Milestone, Seq: seq}
	}
	return FinishSeqRecorded{Status: o.Status, Seq: seq}
}

// Charged: Delta is added to the run's tree totals as the charge Mark,
// once (ChargeOnce): ErrNoChange for a charge the row has a mark of. A
// charge that takes the tree past its budget for the first time records
// the overrun (Overrun goes from nil to set). The holds named by Settles
// (reserve.go) are dropped in the same write: the spend replaces them.
type Charged struct {
	Mark    ChargeMark
	Delta   jetruntype.UsageTotals
	Settles []string
}

func (ev Charged) apply(r *Row, _ time.Time) error {
	if _, dup := r.chargeOnce(ev.Mark, ev.Delta); dup {
		return ErrNoChange
	}
	r.settle(ev.Settles)
	return nil
}

// RunCounted counts one more nested run against the run's runs budget;
// past its bound it changes nothing and returns an *OverrunError with the
// overrun the new run would cause.
type RunCounted struct{}

func (ev RunCounted) apply(r *Row, _ time.Time) error {
	if o := r.chargeRun(); o != nil {
		return &OverrunError{Overrun: *o}
	}
	return nil
}

// StepsCounted counts on a run no attempt executes any more what its
// stored steps spent (Stored) beyond what the row counts of them
// (CountStoredSteps). ErrNoChange when an attempt holds the run (it counts
// them itself) or the row counts them all already.
type StepsCounted struct{ Stored jetruntype.Usage }

func (ev StepsCounted) apply(r *Row, _ time.Time) error {
	if r.Worker != "" || !r.countStoredSteps(ev.Stored) {
		return ErrNoChange
	}
	return nil
}
