package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// decodeEventReference is the general decode Replay used before
// eventDecoder: Metadata, ParseRunSubject and the attempt header, each the
// plain way. eventDecoder must agree with it on every message.
func decodeEventReference(ns Namespace, msg jetstream.Msg) (events.Event, uint64, error) {
	var seq uint64
	if meta, err := msg.Metadata(); err == nil {
		seq = meta.Sequence.Stream
	}
	meta, err := msg.Metadata()
	if err != nil {
		return events.Event{}, seq, err
	}
	runID, kind, err := ns.ParseRunSubject(msg.Subject())
	if err != nil {
		return events.Event{}, seq, err
	}
	ev := events.Event{
		Seq: meta.Sequence.Stream, Time: meta.Timestamp, RunID: runID, Kind: kind,
		Pending: meta.NumPending, Data: json.RawMessage(msg.Data()),
	}
	ev.Attempt, _ = strconv.Atoi(msg.Headers().Get(events.HeaderAttempt))
	return ev, seq, decodeEvent(&ev)
}

// Replay's decoder of one run's messages gives the same events.Event, sequence and
// error as the general decode, for its own run's subjects and any other.
func TestEventDecoderMatchesGeneralDecode(t *testing.T) {
	t.Parallel()
	for _, prefix := range []Namespace{"", "acme"} {
		t.Run(prefix.Prefix(), func(t *testing.T) {
			t.Parallel()
			_, js := natstest.Connect(t, natstest.RunServer(t))
			ctx := context.Background()
			if err := EnsureStreams(ctx, js, prefix, events.StreamOptions{}); err != nil {
				t.Fatal(err)
			}
			chunk := `{"runId":"r1","seq":1,"data":"x"}`
			msgs := []struct {
				subject, data string
				header        nats.Header
			}{
				{"r1.chunk", chunk, nil},
				{"r1.chunk", chunk, nats.Header{events.HeaderAttempt: {"3"}}},
				{"r1.chunk", chunk, nats.Header{events.HeaderAttempt: {"x"}}},
				{"r1.chunk", chunk, nats.Header{events.HeaderAttempt: {"99999999999999999999"}}},
				{"r1.chunk", chunk, nats.Header{events.HeaderAttempt: {""}, "Other": {"1"}}},
				{"r1.chunk", chunk, nats.Header{"Other": {"1"}}},
				{"r1.chunk", `{"runId":"r1","seq":"bad"}`, nil},
				{"r1.status", `{"status":"completed"}`, nil},
				{"r1.status", `not json`, nil},
				{"r1.progress", `{}`, nil},
				{"r1.whatever", `anything`, nil},
				{"r1.a.b", `anything`, nil},
				{"r10.chunk", chunk, nil},
				{"r1x.chunk", chunk, nil},
				{"r.chunk", chunk, nil},
				{"other.chunk", chunk, nats.Header{events.HeaderAttempt: {"2"}}},
			}
			for _, m := range msgs {
				subject := prefix.Prefix() + ".run." + m.subject
				if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(m.data), Header: m.header}); err != nil {
					t.Fatal(err)
				}
			}
			c, err := js.OrderedConsumer(ctx, prefix.EventsStream(), jetstream.OrderedConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			dec := newEventDecoder(prefix, "r1")
			for i := range msgs {
				msg, err := c.Next()
				if err != nil {
					t.Fatal(err)
				}
				want, wantSeq, wantErr := decodeEventReference(prefix, msg)
				got, gotSeq, gotErr := dec.decode(msg)
				name := fmt.Sprintf("message %d (%s)", i, msg.Subject())
				if !reflect.DeepEqual(got, want) || gotSeq != wantSeq {
					t.Errorf("%s: decoded %+v seq %d, want %+v seq %d", name, got, gotSeq, want, wantSeq)
				}
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
					t.Errorf("%s: error %v, want %v", name, gotErr, wantErr)
				}
			}
		})
	}
}

// ackFields reads an ack subject as nats.go's Metadata does: the same
// stream sequence, timestamp and pending count whenever it accepts one, and
// it refuses exactly the subjects Metadata refuses.
func FuzzAckFieldsMatchesMetadata(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.S.C.1.42.7.1700000000000000000.3",
		"$JS.ACK.dom.HASH.S.C.1.42.7.1700000000000000000.3.rand",
		"$JS.ACK._.HASH.S.C.1.42.7.1700000000000000000.3",
		"$JS.ACK.dom.HASH.S.C.1.42.7.1700000000000000000.3.rand.more.tokens",
		"$JS.ACK.S.C.1.4x2.7.17.3",
		"$JS.ACK.S.C.1.42.7.17.é",
		"$JS.ACK.S.C.1..7..",
		"$JS.ACK.S.C.1.99999999999999999999999.7.17.3",
		"$JS.ACK.S.C.1.42.7.17",
		"$JS.ACK.a.b.S.C.1.42.7.17.3",
		"$JS.ACKS.C.1.42.7.17.3.x.y",
		"$JS.NAK.S.C.1.42.7.17.3",
		"_INBOX.abc",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		seq, stamp, pending, ok := ackFields(reply)
		meta, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		if ok != (err == nil) {
			t.Fatalf("ackFields(%q) ok %v; Metadata error %v", reply, ok, err)
		}
		if ok && (seq != meta.Sequence.Stream || !stamp.Equal(meta.Timestamp) || stamp != meta.Timestamp || pending != meta.NumPending) {
			t.Fatalf("ackFields(%q) = %d, %v, %d; Metadata says %d, %v, %d",
				reply, seq, stamp, pending, meta.Sequence.Stream, meta.Timestamp, meta.NumPending)
		}
	})
}
