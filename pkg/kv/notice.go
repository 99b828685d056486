package kv

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// PublishNoticeAck publishes the notice of r's milestone name to
// jetrun.finish.<handler> with Nats-Msg-Id <runId>.milestone.<name> and
// returns the stream's answer (nil if r records no such notice).
func PublishNoticeAck(ctx context.Context, js jetstream.JetStream, ns events.Namespace, r *jetruntype.Run, name string) (*jetstream.PubAck, error) {
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
