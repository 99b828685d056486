package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// AnnounceRetry bounds the retries of Announce.
const AnnounceRetry = 10 * time.Second

// Announce publishes r's current status: the status event on
// jetrun.run.<id>.status, with a Nats-Msg-Id, so announcing twice (a retry,
// a repair) stores it once within the dedup window. worker names the
// worker that made the transition ("" for a parent or the reconciler).
// When the run owes a finish for the status, the event carries the header
// Jetrun-Finish-Owed and the finisher (pkg/finish, run by every
// parent-worker) publishes the finish: whoever makes the transition (a
// child-worker, a parent client, the reconciler) never publishes to
// jetrun.finish.>, so a child-worker needs no permission on finishes. The
// reconciler republishes a finish the finisher missed.
//
// Transient faults are retried (jsfault.Retry) for at most AnnounceRetry.
func (rt *Runtime) Announce(ctx context.Context, r *model.Row, worker string) error {
	return jsfault.Retry(ctx, AnnounceRetry, func(ctx context.Context) error {
		return rt.PublishStatus(ctx, r, worker, statusMsgID(r))
	})
}

// statusMsgID is the Nats-Msg-Id of r's current status event:
// wire.StatusMsgID, one per run, attempt and status, and for a run no
// attempt started since it was resumed or promoted (readyAt), that moment
// too: such a run given up again has the attempt and status of its
// earlier give-up, and its event is not that one's copy.
func statusMsgID(r *model.Row) string {
	id := wire.StatusMsgID(r.ID, r.Attempt, r.Status)
	if r.StartedAt.IsZero() && !r.ReadyAt.IsZero() {
		id += ".r" + strconv.FormatInt(r.ReadyAt.UnixNano(), 10)
	}
	return id
}

// PublishStatus publishes the status event of r's current status once,
// with the given Nats-Msg-Id.
func (rt *Runtime) PublishStatus(ctx context.Context, r *model.Row, worker, msgID string) error {
	ev := r.StatusEvent(worker)
	data, err := wire.EncodeStatusEvent(&ev)
	if err != nil {
		return fmt.Errorf("jetrun: encode status event of run %s: %w", r.ID, err)
	}
	msg := &nats.Msg{Subject: rt.EventSubject(r.ID, events.KindStatus), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	msg.Header.Set(events.HeaderAttempt, strconv.Itoa(r.Attempt))
	if r.FinishOwed(r.Status) {
		msg.Header.Set(events.HeaderFinishOwed, string(r.Status))
	}
	wire.SetTraceHeaders(r.Trace(), msg.Header)
	if _, err := rt.pub.Publish(ctx, msg); err != nil {
		return fmt.Errorf("jetrun: publish %s status of run %s: %w", r.Status, r.ID, err)
	}
	return nil
}

// PublishFinish publishes the finish of r for status s, deduplicated by
// Nats-Msg-Id <runId>.<status>, and returns the stream's answer (nil if r
// owes no finish for s): within the dedup window a copy already stored
// answers Duplicate with that copy's sequence.
func (rt *Runtime) PublishFinish(ctx context.Context, r *model.Row, s events.Status) (*jetstream.PubAck, error) {
	f, ok := r.FinishMessage(s)
	if !ok {
		return nil, nil
	}
	data, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("jetrun: encode finish of run %s: %w", r.ID, err)
	}
	msg := &nats.Msg{Subject: rt.cfg.Namespace.FinishSubject(f.Handler), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, wire.FinishMsgID(r.ID, s, f.Ending))
	wire.SetTraceHeaders(r.Trace(), msg.Header)
	ack, err := rt.pub.Publish(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("jetrun: publish %s finish of run %s: %w", s, r.ID, err)
	}
	return ack, nil
}

// PublishNotice publishes the notice of r's milestone name to
// jetrun.finish.<handler> with Nats-Msg-Id <runId>.milestone.<name> and
// returns the stream's answer (nil if r records no such notice).
func (rt *Runtime) PublishNotice(ctx context.Context, r *model.Row, name string) (*jetstream.PubAck, error) {
	n, ok := r.NoticeMessage(name)
	if !ok {
		return nil, nil
	}
	data, err := json.Marshal(n)
	if err != nil {
		return nil, fmt.Errorf("jetrun: encode milestone notice of run %s: %w", r.ID, err)
	}
	msg := &nats.Msg{Subject: rt.cfg.Namespace.FinishSubject(n.Handler), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, wire.MilestoneNoticeMsgID(r.ID, name))
	msg.Header.Set(events.HeaderKind, events.KindMilestoneNotice)
	ack, err := rt.pub.Publish(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("jetrun: publish milestone notice %s of run %s: %w", name, r.ID, err)
	}
	return ack, nil
}
