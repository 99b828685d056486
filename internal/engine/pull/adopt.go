package pull

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// CreateOrAdopt creates the durable consumer cfg on stream, or updates the
// one there to cfg, keeping the existing consumer's delivery start (deliver
// policy, start sequence and time): a server refuses to change those, and a
// consumer a Keeper with Resume restored starts at its predecessor's ack
// floor, not at cfg's deliver policy. Without it, every process that starts
// after such a restore would fail to create the consumer ("deliver policy
// can not be updated") and never start.
func CreateOrAdopt(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, stream, cfg.Durable)
	switch {
	case err == nil:
		got := c.CachedInfo().Config
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = got.DeliverPolicy, got.OptStartSeq, got.OptStartTime
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("read consumer %s: %w", cfg.Durable, err)
	}
	return js.CreateOrUpdateConsumer(ctx, stream, cfg)
}
