package events

import (
	"cmp"
)

// DefaultPrefix is the subject prefix of the zero Namespace.
const DefaultPrefix = "jetrun"

// Kinds of event published on a run's subjects (the last token).
const (
	KindStatus    = "status"
	KindChunk     = "chunk"
	KindProgress  = "progress"
	KindMilestone = "milestone"
	KindSignal    = "signal"
	// KindCancel carries a cancel request (CancelEvent). Workers follow
	// every run's cancels with one consumer per process (CancelWildcard).
	KindCancel = "cancel"
)

// Namespace derives every subject, stream and bucket name from one prefix.
// The zero value uses DefaultPrefix.
type Namespace string

// NewNamespace returns the namespace for prefix, or an error if the prefix is
// not a single subject token.
func NewNamespace(prefix string) (Namespace, error) {
	if prefix == "" {
		return Namespace(DefaultPrefix), nil
	}
	if err := validateToken("prefix", prefix); err != nil {
		return "", err
	}
	return Namespace(prefix), nil
}

// Prefix returns the subject prefix.
func (ns Namespace) Prefix() string { return cmp.Or(string(ns), DefaultPrefix) }

// DispatchSubject is where a dispatch for agentType is published.
func (ns Namespace) DispatchSubject(agentType string) string {
	return ns.Prefix() + ".dispatch." + mustToken("agent type", agentType)
}

// RunSubject is the subject of one kind of event of a run.
func (ns Namespace) RunSubject(runID, kind string) string {
	return ns.Prefix() + ".run." + mustToken("run id", runID) + "." + kind
}

// RunWildcard matches every event of one run.
func (ns Namespace) RunWildcard(runID string) string {
	return ns.Prefix() + ".run." + mustToken("run id", runID) + ".>"
}

// SignalSubject is where a signal named name is sent to a run: any NATS
// publish there is stored and reaches the run's run.Wait(ctx, name).
func (ns Namespace) SignalSubject(runID, name string) string {
	return ns.Prefix() + ".signal." + mustToken("run id", runID) + "." + mustToken("signal name", name)
}
