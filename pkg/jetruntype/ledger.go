package jetruntype

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// The delivery ledger of a detached run lives on its row: one slot per
// final status its finish handler is owed a finish for (Finishes, with
// Delivered), and one per milestone name it is owed a notice for
// (Notices). A transition owes a finish (End, Interrupt); the finish
// deliverer claims, marks delivered and releases; the reconciler records
// the copy waiting in the finish stream, marks a finish nobody serves, and
// dead-letters it. Every change goes through the methods below, each used
// as (or inside) a Mutate function.

// FinishState is the delivery ledger of one status's finish: one slot per
// status, so a give-up (interrupted) and a later real result are both
// delivered, each at most once on the happy path.
type FinishState struct {
	// DueAt is when the transition made the finish owed.
	DueAt time.Time `json:"dueAt"`
	// The outcome as it was at the transition (the row may move on).
	Reason            string `json:"reason,omitempty"`
	Error             string `json:"error,omitempty"`
	ChildStillRunning bool   `json:"childStillRunning,omitempty"`
	// Attempts counts handler invocations.
	Attempts int `json:"attempts,omitempty"`
	// ClaimedBy and ClaimedUntil: the deliverer invoking the handler now.
	ClaimedBy    string    `json:"claimedBy,omitempty"`
	ClaimedUntil time.Time `json:"claimedUntil,omitzero"`
	LastError    string    `json:"lastError,omitempty"`
	// FailedAt is set when delivery was given up and the finish
	// dead-lettered.
	FailedAt time.Time `json:"failedAt,omitzero"`
	// Seq is the finish stream sequence of the copy the reconciler last
	// found or published: while it is still in the stream no other copy
	// is published, so one copy per run and status waits for a deliverer.
	Seq uint64 `json:"seq,omitempty"`
	// UnservedSince is set by the reconciler when no deliverer has taken
	// the finish for a while and none follows its handler: the handler has
	// not been seen. A deliverer's claim clears it.
	UnservedSince time.Time `json:"unservedSince,omitzero"`
	// Ending counts the run's earlier endings with this status whose slot
	// this one took over: 0 for the first, 1 when a resumed run was given
	// up again, and so on. It is the finish message's ending and part of
	// its Nats-Msg-Id (wire.FinishMsgID).
	Ending int `json:"ending,omitempty"`
	// Resumed says the run was resumed after this ending (Run.Resume): the
	// run's next ending with this status takes the slot over.
	Resumed bool `json:"resumed,omitempty"`
}

func (r *Run) oweFinish(s events.Status, now time.Time) {
	if r.Detached == nil || r.Detached.OnFinish == "" {
		return
	}
	ending := 0
	if fs, used := r.Finishes[s]; used {
		if !fs.Resumed {
			return // one slot per status and ending
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
	r.Finishes[s] = &FinishState{DueAt: now, Reason: r.Reason, Error: r.Error, ChildStillRunning: r.ChildStillRunning, Ending: ending}
}

// StaleFinish reports whether f announces an earlier ending of its status
// than the one r's slot records now (a resumed run ended so again): such a
// copy is never delivered, and its delivery under way records nothing.
func (r *Run) StaleFinish(f events.Finish) bool {
	fs := r.Finishes[f.Status]
	return fs != nil && f.Ending < fs.Ending
}

// FinishOwed reports whether the finish for s is due and neither delivered
// nor given up.
func (r *Run) FinishOwed(s events.Status) bool {
	f := r.Finishes[s]
	if f == nil || !f.FailedAt.IsZero() {
		return false
	}
	_, delivered := r.Delivered[s]
	return !delivered
}

// PendingFinishes returns the statuses whose finish is owed, oldest first.
func (r *Run) PendingFinishes() []events.Status {
	var out []events.Status
	for s := range r.Finishes {
		if r.FinishOwed(s) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b events.Status) int { return r.Finishes[a].DueAt.Compare(r.Finishes[b].DueAt) })
	return out
}

// NoticeState is the delivery ledger of one milestone notice: one slot per
// (run, milestone name), filled by the run's first milestone of that name,
// so the handler hears each listed milestone once (at least once under a
// crash, like a finish).
type NoticeState struct {
	// Milestone is the milestone announced (the first of its name).
	Milestone events.Milestone `json:"milestone"`
	// DueAt is when the notice was recorded as owed.
	DueAt time.Time `json:"dueAt"`
	// Attempts counts handler invocations.
	Attempts int `json:"attempts,omitempty"`
	// ClaimedBy and ClaimedUntil: the deliverer invoking the handler now.
	ClaimedBy    string    `json:"claimedBy,omitempty"`
	ClaimedUntil time.Time `json:"claimedUntil,omitzero"`
	LastError    string    `json:"lastError,omitempty"`
	// DeliveredAt is set once the handler accepted the notice.
	DeliveredAt time.Time `json:"deliveredAt,omitzero"`
	// FailedAt is set when delivery was given up and the notice
	// dead-lettered.
	FailedAt time.Time `json:"failedAt,omitzero"`
	// Seq is the finish stream sequence of the copy last published.
	Seq uint64 `json:"seq,omitempty"`
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

// OweNotice records, as a Mutate function would, that the handler of a
// detached run owes a notice for milestone m: it returns ErrNoChange when
// the run does not ask for m's name or a notice of that name is recorded
// already (only the first milestone of a name, by sequence, is announced).
func (r *Run) OweNotice(m events.Milestone, now time.Time) error {
	if !r.Detached.Notifies(m.Name) {
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
	r.Notices[m.Name] = &NoticeState{Milestone: m, DueAt: now}
	return nil
}

// NoticeOwed reports whether the notice of milestone name is due and
// neither delivered nor given up.
func (r *Run) NoticeOwed(name string) bool {
	n := r.Notices[name]
	return n != nil && n.DeliveredAt.IsZero() && n.FailedAt.IsZero()
}

// PendingNotices returns the milestone names whose notice is owed, oldest
// first.
func (r *Run) PendingNotices() []string {
	var out []string
	for name := range r.Notices {
		if r.NoticeOwed(name) {
			out = append(out, name)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return r.Notices[a].Milestone.Sequence - r.Notices[b].Milestone.Sequence })
	return out
}

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

// finishOrderWait is how long a finish waits for an earlier one of its run
// to be delivered first.
const finishOrderWait = time.Second

// CheckFinish says whether the finish for s can be claimed at now, and
// for DeliveryLater how long to wait. Finishes go out in the order their
// transitions happened: a give-up before a later real result.
func (r *Run) CheckFinish(s events.Status, now time.Time) (Delivery, time.Duration) {
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
	if fs != nil && fs.ClaimedUntil.After(now) {
		return DeliveryLater, fs.ClaimedUntil.Sub(now)
	}
	return DeliverNow, 0
}

// ClaimFinish claims the finish for s for deliverer by until until and
// returns the attempt it starts (1 for the first). A finish no transition
// recorded (published by hand) gets a slot from f, due now.
func (r *Run) ClaimFinish(s events.Status, f events.Finish, by string, until, now time.Time) int {
	if r.Finishes == nil {
		r.Finishes = make(map[events.Status]*FinishState)
	}
	fs := r.Finishes[s]
	if fs == nil {
		fs = &FinishState{DueAt: now, Reason: f.Reason, Error: f.Error, ChildStillRunning: f.ChildStillRunning}
		r.Finishes[s] = fs
	}
	fs.Attempts++
	fs.ClaimedBy, fs.ClaimedUntil = by, until
	fs.UnservedSince = time.Time{} // its handler is served after all
	return fs.Attempts
}

// FinishDelivered records that the finish for s was delivered (the first
// delivery's time stays) and returns when it became due.
func (r *Run) FinishDelivered(s events.Status, now time.Time) (dueAt time.Time) {
	if r.Delivered == nil {
		r.Delivered = make(map[events.Status]time.Time)
	}
	if _, ok := r.Delivered[s]; !ok {
		r.Delivered[s] = now
	}
	if fs := r.Finishes[s]; fs != nil {
		fs.ClaimedBy, fs.ClaimedUntil, fs.LastError = "", time.Time{}, ""
		dueAt = fs.DueAt
	}
	return dueAt
}

// ReleaseFinish drops the claim on the finish for s after a failed attempt,
// recording cause; with failed it also records that delivery was given up.
// It returns ErrNoChange if r records no such finish.
func (r *Run) ReleaseFinish(s events.Status, cause string, failed bool, now time.Time) error {
	fs := r.Finishes[s]
	if fs == nil {
		return ErrNoChange
	}
	fs.release(cause, failed, now)
	return nil
}

// RecordFinishSeq records the finish stream sequence of the copy of the
// finish for s waiting for a deliverer; ErrNoChange if it is not owed or
// already recorded.
func (r *Run) RecordFinishSeq(s events.Status, seq uint64) error {
	fs := r.Finishes[s]
	if fs == nil || !r.FinishOwed(s) || fs.Seq == seq {
		return ErrNoChange
	}
	fs.Seq = seq
	return nil
}

// finishUntaken reports whether the finish for s is owed and no deliverer
// has ever taken it, nor holds it at now.
func (r *Run) finishUntaken(s events.Status, now time.Time) (*FinishState, bool) {
	fs := r.Finishes[s]
	if fs == nil || !r.FinishOwed(s) || fs.Attempts > 0 || fs.ClaimedUntil.After(now) {
		return nil, false
	}
	return fs, true
}

// MarkFinishUnserved records that no deliverer follows the handler of the
// finish for s, which no deliverer has taken; ErrNoChange if one did or it
// is marked already.
func (r *Run) MarkFinishUnserved(s events.Status, now time.Time) error {
	fs, ok := r.finishUntaken(s, now)
	if !ok || !fs.UnservedSince.IsZero() {
		return ErrNoChange
	}
	fs.UnservedSince = now
	return nil
}

// FailUnservedFinish gives up the finish for s, which no deliverer has
// taken, with reason (it was dead-lettered); ErrNoChange if a deliverer
// took it after all.
func (r *Run) FailUnservedFinish(s events.Status, reason string, now time.Time) error {
	fs, ok := r.finishUntaken(s, now)
	if !ok {
		return ErrNoChange
	}
	fs.FailedAt, fs.LastError = now, reason
	return nil
}

// CheckNotice says whether the notice of milestone name can be claimed at
// now, and for DeliveryLater how long to wait.
func (r *Run) CheckNotice(name string, now time.Time) (Delivery, time.Duration) {
	n := r.Notices[name]
	if n == nil || !r.NoticeOwed(name) {
		return DeliveryDone, 0 // delivered, given up, or not recorded by jetrun
	}
	if n.ClaimedUntil.After(now) {
		return DeliveryLater, n.ClaimedUntil.Sub(now)
	}
	return DeliverNow, 0
}

// ClaimNotice claims the notice of milestone name (CheckNotice said
// DeliverNow) for deliverer by until until and returns the attempt it
// starts.
func (r *Run) ClaimNotice(name, by string, until time.Time) int {
	n := r.Notices[name]
	n.Attempts++
	n.ClaimedBy, n.ClaimedUntil = by, until
	return n.Attempts
}

// NoticeDelivered records that the notice of milestone name was delivered;
// ErrNoChange if r records no such notice.
func (r *Run) NoticeDelivered(name string, now time.Time) error {
	n := r.Notices[name]
	if n == nil {
		return ErrNoChange
	}
	if n.DeliveredAt.IsZero() {
		n.DeliveredAt = now
	}
	n.ClaimedBy, n.ClaimedUntil, n.LastError = "", time.Time{}, ""
	return nil
}

// ReleaseNotice drops the claim on the notice of milestone name after a
// failed attempt, as ReleaseFinish does.
func (r *Run) ReleaseNotice(name, cause string, failed bool, now time.Time) error {
	n := r.Notices[name]
	if n == nil {
		return ErrNoChange
	}
	n.ClaimedBy, n.ClaimedUntil = "", time.Time{}
	if cause != "" {
		n.LastError = wire.Truncate(cause, maxLastError)
	}
	if failed && n.FailedAt.IsZero() {
		n.FailedAt = now
	}
	return nil
}

// RecordNoticeSeq records the finish stream sequence of the copy of the
// notice of milestone name waiting for a deliverer; ErrNoChange if it is
// not owed or already recorded.
func (r *Run) RecordNoticeSeq(name string, seq uint64) error {
	n := r.Notices[name]
	if n == nil || !r.NoticeOwed(name) || n.Seq == seq {
		return ErrNoChange
	}
	n.Seq = seq
	return nil
}

// maxLastError bounds the handler error a ledger slot keeps.
const maxLastError = 1000

func (fs *FinishState) release(cause string, failed bool, now time.Time) {
	fs.ClaimedBy, fs.ClaimedUntil = "", time.Time{}
	if cause != "" {
		fs.LastError = wire.Truncate(cause, maxLastError)
	}
	if failed && fs.FailedAt.IsZero() {
		fs.FailedAt = now
	}
}

// NoticeMessage is the notice of milestone name, if r records one.
func (r *Run) NoticeMessage(name string) (events.MilestoneNotice, bool) {
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
