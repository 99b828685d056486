package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

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

// PublishNoticeAck publishes the notice of r's milestone name to
// jetrun.finish.<handler> with Nats-Msg-Id <runId>.milestone.<name> and
// returns the stream's answer (nil if r records no such notice).
func PublishNoticeAck(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *Run, name string) (*jetstream.PubAck, error) {
	n, ok := r.NoticeMessage(name)
	if !ok {
		return nil, nil
	}
	data, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("kv: encode milestone notice of run %s: %w", r.ID, err)
	}
	msg := &nats.Msg{Subject: ns.FinishSubject(n.Handler), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, events.MilestoneNoticeMsgID(r.ID, name))
	msg.Header.Set(events.HeaderKind, events.KindMilestoneNotice)
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("kv: publish milestone notice %s of run %s: %w", name, r.ID, err)
	}
	return ack, nil
}
