// Package jetrun opens jetrun in a process: Open creates (or checks) the
// streams and buckets of a namespace on a NATS connection and returns the
// Runtime that the roles share.
//
//	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
//	client, err := parent.New(rt, parent.Config{})
//	w, err := worker.New(rt, worker.Config{})
//
// Open does the I/O; the roles' constructors do none.
package jetrun
