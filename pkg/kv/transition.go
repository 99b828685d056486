package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/jsfault"
)

// PublishTransition announces r's current status: the status event on
// jetrun.run.<id>.status, with a Nats-Msg-Id, so announcing twice (a retry,
// a repair) stores it once within the dedup window. When the run owes a
// finish for the status, the event carries the header Jetrun-Finish-Owed
// and the finisher (pkg/finish, run by every parent-worker) publishes the
// finish: whoever makes the transition (a child-worker, a parent client,
// the reconciler) never publishes to jetrun.finish.>, so a child-worker
// needs no permission on finishes. The reconciler republishes a finish the
// finisher missed.
//
// Transient faults are retried (jsfault.Retry) for at most TransitionRetry.
func PublishTransition(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *jetruntype.Run, worker string) error {
	return jsfault.Retry(ctx, TransitionRetry, func(ctx context.Context) error {
		return PublishStatus(ctx, js, ns, r, worker, events.StatusMsgID(r.ID, r.Attempt, r.Status))
	})
}

// TransitionRetry bounds the retries of PublishTransition.
const TransitionRetry = 10 * time.Second

// PublishStatus publishes the status event of r's current status with the
// given Nats-Msg-Id.
func PublishStatus(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *jetruntype.Run, worker, msgID string) error {
	data, err := json.Marshal(r.StatusEvent(worker))
	if err != nil {
		return fmt.Errorf("kv: encode status event of run %s: %w", r.ID, err)
	}
	msg := &nats.Msg{Subject: ns.RunSubject(r.ID, events.KindStatus), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	msg.Header.Set(events.HeaderAttempt, strconv.Itoa(r.Attempt))
	if r.FinishOwed(r.Status) {
		msg.Header.Set(events.HeaderFinishOwed, string(r.Status))
	}
	r.Trace().SetHeaders(msg.Header)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("kv: publish %s status of run %s: %w", r.Status, r.ID, err)
	}
	return nil
}

// PublishFinish publishes the finish of r for status s, deduplicated by
// Nats-Msg-Id <runId>.<status>.
func PublishFinish(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *jetruntype.Run, s events.Status) error {
	_, err := PublishFinishAck(ctx, js, ns, r, s)
	return err
}

// PublishFinishAck is PublishFinish returning the stream's answer (nil if r
// owes no finish for s): within the dedup window a copy already stored
// answers Duplicate with that copy's sequence.
func PublishFinishAck(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *jetruntype.Run, s events.Status) (*jetstream.PubAck, error) {
	f, ok := r.FinishMessage(s)
	if !ok {
		return nil, nil
	}
	data, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("kv: encode finish of run %s: %w", r.ID, err)
	}
	msg := &nats.Msg{Subject: ns.FinishSubject(f.Handler), Data: data, Header: nats.Header{}}
	r.Trace().SetHeaders(msg.Header)
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(events.FinishMsgID(r.ID, s)))
	if err != nil {
		return nil, fmt.Errorf("kv: publish %s finish of run %s: %w", s, r.ID, err)
	}
	return ack, nil
}
