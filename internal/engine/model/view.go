package model

import (
	"bytes"
	"maps"
	"slices"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// View returns the run as a user reads it: every field of r that means
// something to a user, none of the engine's bookkeeping (the holder's
// epoch and lease, the hand-off and blink marks, signal positions, charge
// marks, stream sequences, the index flag, the ledger's claims). It is a
// deep copy: nothing the caller does to it reaches r. A nil r views as nil.
func (r *Row) View() *jetruntype.Run {
	if r == nil {
		return nil
	}
	return &jetruntype.Run{
		ID:                r.ID,
		AgentType:         r.AgentType,
		Parent:            r.Parent,
		ParentToolCallID:  r.ParentToolCallID,
		DisplayOrder:      r.DisplayOrder,
		Depth:             r.Depth,
		Input:             bytes.Clone(r.Input),
		Detached:          cloneDetached(r.Detached),
		TraceParent:       r.TraceParent,
		TraceState:        r.TraceState,
		Status:            r.Status,
		Reason:            r.Reason,
		Error:             r.Error,
		Retryable:         r.Retryable,
		ChildStillRunning: r.ChildStillRunning,
		Summary:           r.Summary,
		Output:            bytes.Clone(r.Output),
		Progress:          clonePtr(r.Progress),
		Milestones:        r.Milestones,
		LastMilestone:     r.LastMilestone,
		Chunks:            r.Chunks,
		Attempt:           r.Attempt,
		Handoffs:          r.Handoffs,
		Worker:            r.Worker,
		WaitingFor:        r.WaitingFor,
		CancelRequested:   r.CancelRequested,
		CancelReason:      r.CancelReason,
		Delivered:         maps.Clone(r.Delivered),
		Finishes:          finishViews(r.Finishes),
		Notices:           noticeViews(r.Notices),
		Redispatches:      r.Redispatches,
		CreatedAt:         r.CreatedAt,
		StartedAt:         r.StartedAt,
		LastSignalAt:      r.LastSignalAt,
		FinishedAt:        r.FinishedAt,
		ReadyAt:           r.ReadyAt,
		ConcurrencyKey:    r.ConcurrencyKey,
		Tenant:            r.Tenant,
		Strategy:          r.Strategy,
		DebounceMs:        r.DebounceMs,
		NotBefore:         r.NotBefore,
		SupersededBy:      r.SupersededBy,
		MergedInto:        r.MergedInto,
		Merged:            slices.Clone(r.Merged),
		Usage:             cloneUsage(r.Usage),
		Root:              r.Root,
		BudgetFrom:        slices.Clone(r.BudgetFrom),
		Budget:            clonePtr(r.Budget),
		Session:           r.Session,
		TreeUsage:         clonePtr(r.TreeUsage),
		TreeRuns:          r.TreeRuns,
		Overrun:           clonePtr(r.Overrun),
		Holds:             slices.Clone(r.Holds),
		FirstEventSeq:     r.FirstEventSeq,
		ForkedFrom:        cloneFork(r.ForkedFrom),
	}
}

// Views returns the view of every row of rows, in order.
func Views(rows []*Row) []*jetruntype.Run {
	out := make([]*jetruntype.Run, len(rows))
	for i, r := range rows {
		out[i] = r.View()
	}
	return out
}

// delivery is what a reader sees of s.
func (s *Slot) delivery() jetruntype.Delivery {
	return jetruntype.Delivery{DueAt: s.DueAt, Attempts: s.Attempts, LastError: s.LastError, FailedAt: s.FailedAt}
}

func finishViews(m map[events.Status]*FinishState) map[events.Status]*jetruntype.FinishDelivery {
	if m == nil {
		return nil
	}
	out := make(map[events.Status]*jetruntype.FinishDelivery, len(m))
	for s, f := range m {
		out[s] = &jetruntype.FinishDelivery{
			Delivery: f.delivery(), Reason: f.Reason, Error: f.Error, ChildStillRunning: f.ChildStillRunning,
			UnservedSince: f.UnservedSince, Ending: f.Ending,
		}
	}
	return out
}

func noticeViews(m map[string]*NoticeState) map[string]*jetruntype.NoticeDelivery {
	if m == nil {
		return nil
	}
	out := make(map[string]*jetruntype.NoticeDelivery, len(m))
	for name, n := range m {
		m := n.Milestone
		m.Data = bytes.Clone(m.Data)
		out[name] = &jetruntype.NoticeDelivery{Delivery: n.delivery(), Milestone: m, DeliveredAt: n.DeliveredAt}
	}
	return out
}

func cloneDetached(d *events.Detached) *events.Detached {
	if d == nil {
		return nil
	}
	c := *d
	c.OnMilestones = slices.Clone(d.OnMilestones)
	return &c
}

func cloneUsage(u *jetruntype.Usage) *jetruntype.Usage {
	if u == nil {
		return nil
	}
	c := *u
	c.Models = maps.Clone(u.Models)
	return &c
}

// clonePtr returns a copy of *p, or nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

func cloneFork(f *jetruntype.Fork) *jetruntype.Fork {
	if f == nil {
		return nil
	}
	c := *f
	c.Given, c.Overridden = slices.Clone(f.Given), slices.Clone(f.Overridden)
	return &c
}
