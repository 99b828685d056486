// Package wire is the engine's side of the contract in package events: the
// names of jetrun's streams, buckets and consumers and the wildcards it
// subscribes to (Namespace), the message ids that make publishes
// idempotent, creating the streams, dead-lettering, trace headers, and
// reading a run's stored events back (Replay).
package wire
