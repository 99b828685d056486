// Package jetruntype is jetrun's read types: a run as a user reads it
// (Run, with how its finishes and milestone notices are delivered), as
// parent.Client.Inspect, kv.Runs, worker handlers and finish handlers hand
// it out, the failure of a run (Failure), usage and budgets, and the
// outcomes every handler may return (Cancel, RetryAfter). It is a leaf
// package, like River's rivertype: it imports only events and does no
// I/O. A Run is data, a copy built for each read; jetrun's engine keeps
// the stored row (with its own bookkeeping) and changes it, never a user.
package jetruntype
