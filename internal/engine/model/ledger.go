package model

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// maxLastError bounds the handler error a ledger slot keeps.
const maxLastError = 1000

// finishOrderWait is how long a finish waits for an earlier one of its run
// to be delivered first.
const finishOrderWait = time.Second

// A Delivery says what a deliverer holding a copy of a finish or notice
// does with it now.
type Delivery int

const (
	// DeliverNow: claim it and call the handler.
	DeliverNow Delivery = iota
	// DeliveryDone: delivered, given up, or never owed; drop the copy.
	DeliveryDone
	// DeliveryLater: another deliverer holds the claim, or an earlier
	// finish of the run goes first; look again after the wait.
	DeliveryLater
)

func (r *Row) oweFinish(s events.Status, now time.Time) {
	if r.Detached == nil || r.Detached.OnFinish == "" {
		return
	}
	ending := 0
	if fs, used := r.Finishes[s]; used {
		if !fs.Resumed || s.Final() {
			return // one slot per status and ending; a final status is reached once
		}
		// A resumed run ended with the status again: its handler hears
		// this ending too, under its own message id. A copy of the earlier
		// one not delivered by now is dropped (StaleFinish): the handler
		// hears the later ending.
		ending = fs.Ending + 1
		delete(r.Delivered, s)
	}
	if r.Finishes == nil {
		r.Finishes = make(map[events.Status]*FinishState)
	}
	r.Finishes[s] = &FinishState{Slot: Slot{DueAt: now}, Reason: r.Reason, Error: r.Error, ChildStillRunning: r.ChildStillRunning, Ending: ending}
}

// StaleFinish reports whether f announces an earlier ending of its status
// than the one r's slot records now (a resumed run ended so again): such a
// copy is never delivered, and its delivery under way records nothing.
func (r *Row) StaleFinish(f events.Finish) bool {
	fs := r.Finishes[f.Status]
	return fs != nil && f.Ending < fs.Ending
}

// FinishOwed reports whether the finish for s is due and neither delivered
// nor given up.
func (r *Row) FinishOwed(s events.Status) bool {
	f := r.Finishes[s]
	if f == nil || !f.FailedAt.IsZero() {
		return false
	}
	_, delivered := r.Delivered[s]
	return !delivered
}

// PendingFinishes returns the statuses whose finish is owed, oldest first.
func (r *Row) PendingFinishes() []events.Status {
	var out []events.Status
	for s := range r.Finishes {
		if r.FinishOwed(s) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b events.Status) int { return r.Finishes[a].DueAt.Compare(r.Finishes[b].DueAt) })
	return out
}

func cloneNotices(m map[string]*NoticeState) map[string]*NoticeState {
	if m == nil {
		return nil
	}
	c := make(map[string]*NoticeState, len(m))
	for k, v := range m {
		n := *v
		c[k] = &n
	}
	return c
}

// oweNotice records, as a Mutate function would, that the handler of a
// detached run owes a notice for milestone m: it returns ErrNoChange when
// the run does not ask for m's name or a notice of that name is recorded
// already (only the first milestone of a name, by sequence, is announced).
func (r *Row) oweNotice(m events.Milestone, now time.Time) error {
	if !wire.Notifies(r.Detached, m.Name) {
		return ErrNoChange
	}
	if n, used := r.Notices[m.Name]; used {
		// An earlier milestone of the name seen late (its event was
		// redelivered) takes the slot while no delivery has begun.
		if m.Sequence >= n.Milestone.Sequence || n.Attempts > 0 || !n.DeliveredAt.IsZero() || !n.FailedAt.IsZero() {
			return ErrNoChange
		}
		n.Milestone = m
		return nil
	}
	if r.Notices == nil {
		r.Notices = make(map[string]*NoticeState)
	}
	r.Notices[m.Name] = &NoticeState{Slot: Slot{DueAt: now}, Milestone: m}
	return nil
}

// NoticeOwed reports whether the notice of milestone name is due and
// neither delivered nor given up.
func (r *Row) NoticeOwed(name string) bool {
	n := r.Notices[name]
	return n != nil && n.DeliveredAt.IsZero() && n.FailedAt.IsZero()
}

// PendingNotices returns the milestone names whose notice is owed, oldest
// first.
func (r *Row) PendingNotices() []string {
	var out []string
	for name := range r.Notices {
		if r.NoticeOwed(name) {
			out = append(out, name)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return r.Notices[a].Milestone.Sequence - r.Notices[b].Milestone.Sequence })
	return out
}

// CheckFinish says whether the finish for s can be claimed at now, and
// for DeliveryLater how long to wait. Finishes go out in the order their
// transitions happened: a give-up before a later real result.
func (r *Row) CheckFinish(s events.Status, now time.Time) (Delivery, time.Duration) {
	if _, done := r.Delivered[s]; done {
		return DeliveryDone, 0
	}
	fs := r.Finishes[s]
	if fs != nil && !fs.FailedAt.IsZero() {
		return DeliveryDone, 0
	}
	for _, other := range r.PendingFinishes() {
		if other != s && fs != nil && r.Finishes[other].DueAt.Before(fs.DueAt) {
			return DeliveryLater, finishOrderWait
		}
	}
	if fs == nil {
		return DeliverNow, 0
	}
	return slotOf(&fs.Slot).check(now)
}

// claimFinish claims the finish for s for deliverer by until until and
// returns the attempt it starts (1 for the first). A finish no transition
// recorded (published by hand) gets a slot from f, due now.
func (r *Row) claimFinish(s events.Status, f events.Finish, by string, until, now time.Time) int {
	if r.Finishes == nil {
		r.Finishes = make(map[events.Status]*FinishState)
	}
	fs := r.Finishes[s]
	if fs == nil {
		fs = &FinishState{Slot: Slot{DueAt: now}, Reason: f.Reason, Error: f.Error, ChildStillRunning: f.ChildStillRunning}
		r.Finishes[s] = fs
	}
	fs.UnservedSince = time.Time{} // its handler is served after all
	return slotOf(&fs.Slot).claim(by, until)
}

// finishDelivered records that the finish for s was delivered (the first
// delivery's time stays) and returns when it became due.
func (r *Row) finishDelivered(s events.Status, now time.Time) (dueAt time.Time) {
	if r.Delivered == nil {
		r.Delivered = make(map[events.Status]time.Time)
	}
	if _, ok := r.Delivered[s]; !ok {
		r.Delivered[s] = now
	}
	if fs := r.Finishes[s]; fs != nil {
		slotOf(&fs.Slot).delivered()
		dueAt = fs.DueAt
	}
	return dueAt
}

// releaseFinish drops the claim on the finish for s after a failed attempt,
// recording cause; with failed it also records that delivery was given up.
// It returns ErrNoChange if r records no such finish.
func (r *Row) releaseFinish(s events.Status, cause string, failed bool, now time.Time) error {
	fs := r.Finishes[s]
	if fs == nil {
		return ErrNoChange
	}
	slotOf(&fs.Slot).release(cause, failed, now)
	return nil
}

// recordFinishSeq records the finish stream sequence of the copy of the
// finish for s waiting for a deliverer; ErrNoChange if it is not owed or
// already recorded.
func (r *Row) recordFinishSeq(s events.Status, seq uint64) error {
	fs := r.Finishes[s]
	if fs == nil || !r.FinishOwed(s) {
		return ErrNoChange
	}
	return slotOf(&fs.Slot).recordSeq(seq)
}

// finishUntaken reports whether the finish for s is owed and no deliverer
// has ever taken it, nor holds it at now.
func (r *Row) finishUntaken(s events.Status, now time.Time) (*FinishState, bool) {
	fs := r.Finishes[s]
	if fs == nil || !r.FinishOwed(s) || fs.Attempts > 0 || fs.ClaimedUntil.After(now) {
		return nil, false
	}
	return fs, true
}

// markFinishUnserved records that no deliverer follows the handler of the
// finish for s, which no deliverer has taken; ErrNoChange if one did or it
// is marked already.
func (r *Row) markFinishUnserved(s events.Status, now time.Time) error {
	fs, ok := r.finishUntaken(s, now)
	if !ok || !fs.UnservedSince.IsZero() {
		return ErrNoChange
	}
	fs.UnservedSince = now
	return nil
}

// failUnservedFinish gives up the finish for s, which no deliverer has
// taken, with reason (it was dead-lettered); ErrNoChange if a deliverer
// took it after all.
func (r *Row) failUnservedFinish(s events.Status, reason string, now time.Time) error {
	fs, ok := r.finishUntaken(s, now)
	if !ok {
		return ErrNoChange
	}
	fs.FailedAt, fs.LastError = now, reason
	return nil
}

// CheckNotice says whether the notice of milestone name can be claimed at
// now, and for DeliveryLater how long to wait.
func (r *Row) CheckNotice(name string, now time.Time) (Delivery, time.Duration) {
	n := r.Notices[name]
	if n == nil || !r.NoticeOwed(name) {
		return DeliveryDone, 0 // delivered, given up, or not recorded by jetrun
	}
	return slotOf(&n.Slot).check(now)
}

// claimNotice claims the notice of milestone name (CheckNotice said
// DeliverNow) for deliverer by until until and returns the attempt it
// starts.
func (r *Row) claimNotice(name, by string, until time.Time) int {
	return slotOf(&r.Notices[name].Slot).claim(by, until)
}

// noticeDelivered records that the notice of milestone name was delivered;
// ErrNoChange if r records no such notice.
func (r *Row) noticeDelivered(name string, now time.Time) error {
	n := r.Notices[name]
	if n == nil {
		return ErrNoChange
	}
	if n.DeliveredAt.IsZero() {
		n.DeliveredAt = now
	}
	slotOf(&n.Slot).delivered()
	return nil
}

// releaseNotice drops the claim on the notice of milestone name after a
// failed attempt, as ReleaseFinish does.
func (r *Row) releaseNotice(name, cause string, failed bool, now time.Time) error {
	n := r.Notices[name]
	if n == nil {
		return ErrNoChange
	}
	slotOf(&n.Slot).release(cause, failed, now)
	return nil
}

// recordNoticeSeq records the finish stream sequence of the copy of the
// notice of milestone name waiting for a deliverer; ErrNoChange if it is
// not owed or already recorded.
func (r *Row) recordNoticeSeq(name string, seq uint64) error {
	n := r.Notices[name]
	if n == nil || !r.NoticeOwed(name) {
		return ErrNoChange
	}
	return slotOf(&n.Slot).recordSeq(seq)
}

// A deliverer decides on the attempt it claimed with the slot's
// predicates, through these: whether it is the last, and how long to wait
// before the next. The attempt's number is for what it reports.

// finishSlot is the slot of the finish for s; a zero slot if r records
// none.
func (r *Row) finishSlot(s events.Status) *slot {
	if fs := r.Finishes[s]; fs != nil {
		return slotOf(&fs.Slot)
	}
	return &slot{}
}

// noticeSlot is the slot of the notice of milestone name; a zero slot if r
// records none.
func (r *Row) noticeSlot(name string) *slot {
	if n := r.Notices[name]; n != nil {
		return slotOf(&n.Slot)
	}
	return &slot{}
}

// FinishAttempts is how many deliveries of the finish for s were claimed:
// the number of the attempt under way (0 if r records no such finish).
func (r *Row) FinishAttempts(s events.Status) int { return r.finishSlot(s).Attempts }

// FinishSpent reports whether the finish for s was claimed limit times or
// more: a failure of the attempt under way gives its delivery up.
func (r *Row) FinishSpent(s events.Status, limit int) bool { return r.finishSlot(s).Spent(limit) }

// FinishBackoff is how long the finish for s waits after a failure of the
// attempt under way: base, doubled for each attempt before it, at most
// ceiling.
func (r *Row) FinishBackoff(s events.Status, base, ceiling time.Duration) time.Duration {
	return r.finishSlot(s).Backoff(base, ceiling)
}

// NoticeAttempts is FinishAttempts for the notice of milestone name.
func (r *Row) NoticeAttempts(name string) int { return r.noticeSlot(name).Attempts }

// NoticeSpent is FinishSpent for the notice of milestone name.
func (r *Row) NoticeSpent(name string, limit int) bool { return r.noticeSlot(name).Spent(limit) }

// NoticeBackoff is FinishBackoff for the notice of milestone name.
func (r *Row) NoticeBackoff(name string, base, ceiling time.Duration) time.Duration {
	return r.noticeSlot(name).Backoff(base, ceiling)
}

// NoticeCopyAt reports whether r records the copy of the notice of
// milestone name waiting for a deliverer at finish stream sequence seq:
// recording it there (NoticeSeqRecorded) would change nothing.
func (r *Row) NoticeCopyAt(name string, seq uint64) bool {
	n := r.Notices[name]
	return n != nil && slotOf(&n.Slot).CopyAt(seq)
}

// NoticeMessage is the notice of milestone name, if r records one.
func (r *Row) NoticeMessage(name string) (events.MilestoneNotice, bool) {
	n := r.Notices[name]
	if n == nil || r.Detached == nil || r.Detached.OnFinish == "" {
		return events.MilestoneNotice{}, false
	}
	row, err := json.Marshal(r)
	if err != nil {
		return events.MilestoneNotice{}, false
	}
	return events.MilestoneNotice{
		Kind: events.KindMilestoneNotice, RunID: r.ID, Handler: r.Detached.OnFinish,
		Milestone: n.Milestone, Run: row,
	}, true
}

// slot is a delivery slot's behaviour, shared by finishes and notices: the
// one place that says how a claim, a delivery, a failed attempt and the
// copy waiting in the finish stream are recorded.
type slot Slot

func slotOf(s *Slot) *slot { return (*slot)(s) }

// check says whether the slot can be claimed at now: DeliveryLater, with
// the wait, while another deliverer's claim runs.
func (s *slot) check(now time.Time) (Delivery, time.Duration) {
	if s.ClaimedUntil.After(now) {
		return DeliveryLater, s.ClaimedUntil.Sub(now)
	}
	return DeliverNow, 0
}

// claim starts an attempt for deliverer by, held until until, and returns
// its number (1 for the first).
func (s *slot) claim(by string, until time.Time) int {
	s.Attempts++
	s.ClaimedBy, s.ClaimedUntil = by, until
	return s.Attempts
}

// delivered drops the claim of an attempt that delivered.
func (s *slot) delivered() {
	s.ClaimedBy, s.ClaimedUntil, s.LastError = "", time.Time{}, ""
}

// release drops the claim of a failed attempt, recording cause; with
// failed it also records that delivery was given up.
func (s *slot) release(cause string, failed bool, now time.Time) {
	s.ClaimedBy, s.ClaimedUntil = "", time.Time{}
	if cause != "" {
		s.LastError = wire.Truncate(cause, maxLastError)
	}
	if failed && s.FailedAt.IsZero() {
		s.FailedAt = now
	}
}

// recordSeq records the finish stream sequence of the copy waiting for a
// deliverer; ErrNoChange if it is recorded already.
func (s *slot) recordSeq(seq uint64) error {
	if s.CopyAt(seq) {
		return ErrNoChange
	}
	s.Seq = seq
	return nil
}

// CopyAt reports whether the slot records its copy waiting for a
// deliverer at finish stream sequence seq (0: none recorded).
func (s *slot) CopyAt(seq uint64) bool { return s.Seq == seq }

// Spent reports whether the slot's deliveries have been claimed limit
// times or more: the attempt under way is its last, and if it fails the
// delivery is given up.
func (s *slot) Spent(limit int) bool { return s.Attempts >= limit }

// Backoff is the wait before the attempt after the one under way fails:
// base after the first, doubled after each one after it, at most ceiling.
func (s *slot) Backoff(base, ceiling time.Duration) time.Duration {
	return min(base<<min(max(s.Attempts-1, 0), 20), ceiling)
}

// Owed is one delivery a run's ledger still owes: a finish (Status set) or
// a milestone notice (Milestone set), with its slot.
type Owed struct {
	Status    events.Status
	Milestone string
	Slot      *Slot
}

// Owed returns every finish and notice r still owes: finishes in the order
// they became due, then notices in milestone order.
func (r *Row) Owed() []Owed {
	var out []Owed
	for _, s := range r.PendingFinishes() {
		out = append(out, Owed{Status: s, Slot: &r.Finishes[s].Slot})
	}
	for _, name := range r.PendingNotices() {
		out = append(out, Owed{Milestone: name, Slot: &r.Notices[name].Slot})
	}
	return out
}
