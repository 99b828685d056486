package wire_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A delivery wrapped by WithMetadata answers Metadata as the delivery
// does, from one parse, and still settles as the delivery.
func TestWithMetadataAnswersAsTheDelivery(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "M", Subjects: []string{"m.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := js.Publish(ctx, "m.a", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		want, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		w := wire.WithMetadata(m)
		got, err := w.Metadata()
		if err != nil || !reflect.DeepEqual(got, want) || wire.WithMetadata(w) != w {
			t.Fatalf("wrapped metadata %+v (%v), the delivery's %+v", got, err, want)
		}
		if wire.StreamSeq(w) != want.Sequence.Stream {
			t.Fatalf("stream sequence %d, want %d", wire.StreamSeq(w), want.Sequence.Stream)
		}
		if err := w.DoubleAck(ctx); err != nil {
			t.Fatalf("ack through the wrapper: %v", err)
		}
	}
	info, err := c.Info(ctx)
	if err != nil || info.NumAckPending != 0 || info.AckFloor.Stream != 2 {
		t.Fatalf("after the acks: %+v %v", info, err)
	}
}
