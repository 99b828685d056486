// Package events is jetrun's wire contract: the messages on its subjects,
// the run statuses, identifier rules and the subjects a producer publishes
// on (Namespace). How the engine stores and reads them on JetStream (stream
// and consumer names, message ids, replay) is internal.
//
// It is a leaf package: it imports nothing else of jetrun, so a service in any
// language can mirror it from docs/protocol.md alone.
//
// Invariants:
//   - Run ids, agent types and finish handler names are single subject tokens
//     matching [A-Za-z0-9_-]{1,64}. Nothing built here ever carries '.', '*',
//     '>' or whitespace into a subject, whatever the caller passes in:
//     builders panic on an invalid token, so callers validate first
//     ([ValidateID], [ValidateToken]).
//   - Every subject and stream name is derived from one Namespace (default
//     prefix "jetrun"), so two deployments can share a NATS account.
//   - Decoders never panic on bad input; they return an error that says what
//     was wrong, suitable as a dead-letter reason.
package events
