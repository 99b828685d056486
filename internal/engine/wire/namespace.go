package wire

import (
	"fmt"
	"strings"

	"github.com/jetrun/jetrun/pkg/events"
)

// Namespace is events.Namespace with the names only the engine uses: its
// streams, buckets, consumers and wildcards. Convert with
// wire.Namespace(ns); the conversion is free.
type Namespace events.Namespace

func (ns Namespace) prefix() string { return events.Namespace(ns).Prefix() }

func (ns Namespace) streamName(suffix string) string {
	return strings.ToUpper(ns.prefix()) + "_" + suffix
}

// Prefix returns the subject prefix ("jetrun" by default).
func (ns Namespace) Prefix() string { return ns.prefix() }

// DispatchSubject is where a dispatch for agentType is published.
func (ns Namespace) DispatchSubject(agentType string) string {
	return events.Namespace(ns).DispatchSubject(agentType)
}

// RunSubject is the subject of one kind of event of a run.
func (ns Namespace) RunSubject(runID, kind string) string {
	return events.Namespace(ns).RunSubject(runID, kind)
}

// RunWildcard matches every event of one run.
func (ns Namespace) RunWildcard(runID string) string { return events.Namespace(ns).RunWildcard(runID) }

// SignalSubject is where a signal named name is sent to a run.
func (ns Namespace) SignalSubject(runID, name string) string {
	return events.Namespace(ns).SignalSubject(runID, name)
}

// mustToken returns s, or panics naming what when s is not a valid token:
// names built from validated ids never panic.
func mustToken(what, s string) string {
	if err := events.ValidateID(s); err != nil {
		panic(fmt.Sprintf("wire: invalid %s %q", what, s))
	}
	return s
}

// DispatchStream is the work-queue stream holding dispatches (JETRUN_DISPATCH).
func (ns Namespace) DispatchStream() string { return ns.streamName("DISPATCH") }

// EventsStream is the limits stream holding every run's events (JETRUN_EVENTS).
func (ns Namespace) EventsStream() string { return ns.streamName("EVENTS") }

// DLQStream is the stream holding rejected messages (JETRUN_DLQ).
func (ns Namespace) DLQStream() string { return ns.streamName("DLQ") }

// FinishStream is the work-queue stream holding finish deliveries
// (JETRUN_FINISH).
func (ns Namespace) FinishStream() string { return ns.streamName("FINISH") }

// SignalsStream is the stream holding signals sent to runs (JETRUN_SIGNALS).
func (ns Namespace) SignalsStream() string { return ns.streamName("SIGNALS") }

// RunsBucket is the KV bucket holding one row per run (jetrun_runs).
func (ns Namespace) RunsBucket() string { return ns.prefix() + "_runs" }

// ActiveBucket is the KV bucket holding the active-run index, the per-parent
// concurrency slots and the reconciler's leader lease (jetrun_active).
func (ns Namespace) ActiveBucket() string { return ns.prefix() + "_active" }

// LimitsBucket is the KV bucket holding the provider limits shared by the
// fleet (jetrun_limits): spec.<name>, pool.<name> and pause.<name> per
// limit (package internal/engine/limits).
func (ns Namespace) LimitsBucket() string { return ns.prefix() + "_limits" }

// BucketStream is the stream that holds KV bucket bucket (KV_<bucket>).
func BucketStream(bucket string) string { return "KV_" + bucket }

// BucketSubject is the subject key of KV bucket bucket is stored under
// ($KV.<bucket>.<key>): a publish there with a TTL header or an expected
// last sequence does what the KV API cannot.
func BucketSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// StatusWildcard matches every run's status subject.
func (ns Namespace) StatusWildcard() string { return ns.prefix() + ".run.*." + events.KindStatus }

// CancelWildcard matches every run's cancel subject (jetrun.run.*.cancel).
func (ns Namespace) CancelWildcard() string { return ns.prefix() + ".run.*." + events.KindCancel }

// WorkerSubject is where worker process id answers which of the runs named
// in a question it no longer executes (package internal/holding).
func (ns Namespace) WorkerSubject(id string) string {
	return ns.prefix() + ".worker." + mustToken("worker id", id) + ".holds"
}

// DispatchWildcard matches every dispatch subject.
func (ns Namespace) DispatchWildcard() string { return ns.prefix() + ".dispatch.>" }

// DispatchMalformedWildcard matches dispatch subjects with more than one token
// after "dispatch" ("jetrun.dispatch.a.b"): no agent type can be named that
// way, so such messages are dead-lettered. It never overlaps a single agent
// type's subject, as work-queue consumers require.
func (ns Namespace) DispatchMalformedWildcard() string { return ns.prefix() + ".dispatch.*.>" }

// AgentTypeFromDispatchSubject returns the agent type token of a dispatch
// subject, or "" if the subject is not a single-token dispatch subject.
func (ns Namespace) AgentTypeFromDispatchSubject(subject string) string {
	rest, ok := strings.CutPrefix(subject, ns.prefix()+".dispatch.")
	if !ok || strings.Contains(rest, ".") {
		return ""
	}
	return rest
}

// RunsWildcard matches every event of every run.
func (ns Namespace) RunsWildcard() string { return ns.prefix() + ".run.>" }

// ParseRunSubject splits a run event subject into its run id and kind.
func (ns Namespace) ParseRunSubject(subject string) (runID, kind string, err error) {
	rest, ok := strings.CutPrefix(subject, ns.prefix()+".run.")
	if ok {
		runID, kind, ok = strings.Cut(rest, ".")
	}
	if !ok || events.ValidateID(runID) != nil || kind == "" {
		return "", "", fmt.Errorf("events: %q is not a run event subject", subject)
	}
	return runID, kind, nil
}

// DLQSubject is where rejected dispatches of agentType are kept. An agent type
// that is not a valid token is filed under "_invalid".
func (ns Namespace) DLQSubject(agentType string) string {
	if events.ValidateToken("agent type", agentType) != nil {
		agentType = "_invalid"
	}
	return ns.prefix() + ".dlq." + agentType
}

// RunSignalsWildcard matches every signal subject of one run.
func (ns Namespace) RunSignalsWildcard(runID string) string {
	return ns.prefix() + ".signal." + mustToken("run id", runID) + ".>"
}

// SignalsWildcard matches every signal subject.
func (ns Namespace) SignalsWildcard() string { return ns.prefix() + ".signal.>" }

// DLQFinishSubject is where finishes that could not be delivered to handler
// are kept.
func (ns Namespace) DLQFinishSubject(handler string) string {
	return ns.prefix() + ".dlq.finish." + mustToken("handler name", handler)
}

// FinishSubject is where finishes for the named handler are published.
func (ns Namespace) FinishSubject(handler string) string {
	return ns.prefix() + ".finish." + mustToken("handler name", handler)
}

// FinisherQueue is the queue group of the finishers (pkg/finish) on
// StatusWildcard: one finisher of the fleet handles each status event.
func (ns Namespace) FinisherQueue() string { return ns.prefix() + "-finisher" }

// FinishWildcard matches every finish subject.
func (ns Namespace) FinishWildcard() string { return ns.prefix() + ".finish.>" }

// ObsSubject is the core (not stored) subject of an observability event,
// such as "finish.delivered"; event tokens are fixed by jetrun.
func (ns Namespace) ObsSubject(event string) string { return ns.prefix() + ".obs." + event }

// ObsWildcard matches every observability event.
func (ns Namespace) ObsWildcard() string { return ns.prefix() + ".obs.>" }

// DLQWildcard matches every dead-letter subject.
func (ns Namespace) DLQWildcard() string { return ns.prefix() + ".dlq.>" }

// FinishConsumer is the durable consumer on the finish stream shared by every
// deliverer of handler.
func FinishConsumer(handler string) string { return "finish-" + mustToken("handler name", handler) }

// AgentConsumer is the durable consumer on the dispatch stream shared by
// every worker of agentType.
func AgentConsumer(agentType string) string { return "agent-" + mustToken("agent type", agentType) }

// AgentsBucket is the KV bucket of the agent registry (jetrun_agents): one
// key <agentType>.<worker> per worker and agent type it serves, with a TTL.
func (ns Namespace) AgentsBucket() string { return ns.prefix() + "_agents" }

// CallWildcard matches every run's call subject (jetrun.run.*.call).
func (ns Namespace) CallWildcard() string { return ns.prefix() + ".run.*." + events.KindCall }

// MilestoneWildcard matches every run's milestone subject
// (jetrun.run.*.milestone).
func (ns Namespace) MilestoneWildcard() string { return ns.prefix() + ".run.*." + events.KindMilestone }

// MeterConsumer is the durable consumer on the events stream that meters
// runs (package meter), shared by every metering process.
const MeterConsumer = "meter"

// NoticeConsumer is the durable consumer on the events stream that turns
// milestones into milestone notices (package finish), shared by every
// deliverer.
const NoticeConsumer = "milestone-notices"

// AsksBucket is the KV bucket of the asks (jetrun_asks): one key per ask,
// key = the ask's id (events.Ask).
func (ns Namespace) AsksBucket() string { return ns.prefix() + "_asks" }
