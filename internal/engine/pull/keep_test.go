package pull_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/pull"
)

// Drift flags what changes which messages a consumer delivers, and how,
// and leaves alone the tunables the processes sharing it may set
// differently.
func TestDriftFlagsWhatChangesDelivery(t *testing.T) {
	want := jetstream.ConsumerConfig{Durable: "meter", FilterSubject: "jetrun.run.*.status",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5}
	future := time.Now().Add(time.Hour)
	for name, tc := range map[string]struct {
		change func(*jetstream.ConsumerConfig)
		drift  bool
	}{
		"same":               {func(*jetstream.ConsumerConfig) {}, false},
		"re-pointed":         {func(c *jetstream.ConsumerConfig) { c.FilterSubject = "jetrun.nothing" }, true},
		"filters added":      {func(c *jetstream.ConsumerConfig) { c.FilterSubjects = []string{"a", "b"} }, true},
		"ack none":           {func(c *jetstream.ConsumerConfig) { c.AckPolicy = jetstream.AckNonePolicy }, true},
		"max deliver 1":      {func(c *jetstream.ConsumerConfig) { c.MaxDeliver = 1 }, true},
		"paused":             {func(c *jetstream.ConsumerConfig) { c.PauseUntil = &future }, true},
		"ack wait 1ms":       {func(c *jetstream.ConsumerConfig) { c.AckWait = time.Millisecond }, true},
		"ack wait 10s":       {func(c *jetstream.ConsumerConfig) { c.AckWait = 10 * time.Second }, false},
		"max ack pending 9":  {func(c *jetstream.ConsumerConfig) { c.MaxAckPending = 9 }, false},
		"headers only":       {func(c *jetstream.ConsumerConfig) { c.HeadersOnly = true }, true},
		"max request batch":  {func(c *jetstream.ConsumerConfig) { c.MaxRequestBatch = 1 }, true},
		"server's batch":     {func(c *jetstream.ConsumerConfig) { c.MaxRequestBatch = 1000 }, false},
		"max expires 1ms":    {func(c *jetstream.ConsumerConfig) { c.MaxRequestExpires = time.Millisecond }, true},
		"push (deliver to)":  {func(c *jetstream.ConsumerConfig) { c.DeliverSubject = "x" }, true},
		"description edited": {func(c *jetstream.ConsumerConfig) { c.Description = "mine now" }, false},
	} {
		got := want
		tc.change(&got)
		if d := pull.Drift(want, got); (d != "") != tc.drift {
			t.Errorf("%s: Drift = %q, want drift %v", name, d, tc.drift)
		}
	}
}
