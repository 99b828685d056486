package finish

import (
	"context"
	"github.com/jetrun/jetrun/pkg/jetruntype"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Result is what a finish handler receives: the outcome for one status.
type Result = events.Finish

// IdempotencyKey is the key a handler deduplicates on, the finish's
// Nats-Msg-Id: <runId>.<status>, or <runId>.<status>.<n> for a run's n-th
// ending with the status (docs/protocol.md, "Finishes").
func IdempotencyKey(r Result) string { return wire.FinishMsgID(r.RunID, r.Status, r.Ending) }

// Handler serves finishes. A returned error (or a panic, or running past
// Config.Timeout) is a failed attempt, retried with backoff up to
// Config.MaxAttempts, then dead-lettered. An error marked
// jetruntype.RetryAfter(err, d) is retried after d instead of the backoff;
// one marked jetruntype.Cancel is dead-lettered at once.
type Handler interface {
	ServeFinish(ctx context.Context, run *jetruntype.Run, result Result) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, run *jetruntype.Run, result Result) error

// ServeFinish calls f.
func (f HandlerFunc) ServeFinish(ctx context.Context, run *jetruntype.Run, result Result) error {
	return f(ctx, run, result)
}

// Notice is what a milestone handler receives.
type Notice = events.MilestoneNotice

// NoticeIdempotencyKey is the key a milestone handler deduplicates on:
// <runId>.milestone.<name>, the notice's Nats-Msg-Id.
func NoticeIdempotencyKey(n Notice) string {
	return wire.MilestoneNoticeMsgID(n.RunID, n.Milestone.Name)
}

// MilestoneHandler hears the milestone notices of the runs whose
// detached.onFinish names it. A Handler registered with Handle that also
// implements MilestoneHandler hears them; so does one registered with
// HandleMilestone. A returned error is a failed attempt, retried (or not)
// like a finish's.
type MilestoneHandler interface {
	ServeMilestone(ctx context.Context, run *jetruntype.Run, notice Notice) error
}

// MilestoneHandlerFunc adapts a function to a MilestoneHandler.
type MilestoneHandlerFunc func(ctx context.Context, run *jetruntype.Run, notice Notice) error

// ServeMilestone calls f.
func (f MilestoneHandlerFunc) ServeMilestone(ctx context.Context, run *jetruntype.Run, n Notice) error {
	return f(ctx, run, n)
}
