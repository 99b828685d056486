package wire

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MalformedConsumer is the durable consumer on the dispatch stream that
// dead-letters dispatches whose subject names no valid agent type.
const MalformedConsumer = "dispatch-malformed"

// AgentConsumerConfig is the durable consumer agent-<agentType> on the
// dispatch stream as jetrun creates it, whoever creates it (a worker whose
// credential may, or the parent-worker for the types workers announce):
// the runs of one agent type, acknowledged explicitly, with ackWait the
// workers' lease and at most fleet of them in flight. Attempts are bounded
// on the row, so it redelivers without limit.
func AgentConsumerConfig(ns Namespace, agentType string, ackWait time.Duration, fleet int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       AgentConsumer(agentType),
		Description:   "jetrun workers of agent type " + agentType,
		FilterSubject: ns.DispatchSubject(agentType),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: fleet,
	}
}

// MalformedConsumerConfig is the durable consumer MalformedConsumer as
// jetrun creates it.
func MalformedConsumerConfig(ns Namespace) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       MalformedConsumer,
		Description:   "jetrun: dead-letters dispatches whose subject names no valid agent type",
		FilterSubject: ns.DispatchMalformedWildcard(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
	}
}
