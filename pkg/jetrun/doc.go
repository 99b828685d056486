// Package jetrun is the handle every jetrun role in a process shares: the
// JetStream context, the namespace, the runs store and the bound streams,
// opened once with Open and passed to parent.New, worker.New,
// reconcile.New, finish.New and meter.New.
//
// It is also the one place that writes what several roles write:
//
//   - PublishDispatch and DispatchQueued: a run's dispatch message, and
//     whether it is still queued (parent, reconciler, concurrency keys);
//   - Announce and PublishFinish: a transition's status event and an owed
//     finish (parent, worker, reconciler, finisher);
//   - Erase: every trace of a run (jetrun clear, retention);
//   - Submit, AdvanceKey and the rest of keys.go: runs under a concurrency
//     key, whose queue lives in the store (package kv) and whose dispatches
//     are published here.
//
// Open does the I/O (it creates or checks the streams and buckets); the
// roles' constructors do none.
//
//	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
//	client, err := parent.New(rt, parent.Config{})
//	w, err := worker.New(rt, worker.Config{})
package jetrun
