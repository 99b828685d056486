// Package jetruntype is jetrun's read types: the run row (Run), as
// parent.Client.Inspect, worker handlers and finish handlers see it, the
// failure of a run (Failure), usage and budgets, and the outcomes every
// handler may return (Cancel, RetryAfter). It is a leaf package, like
// River's rivertype: it imports only events and does no I/O. A Run is
// data; jetrun's engine changes rows, never a user.
package jetruntype
