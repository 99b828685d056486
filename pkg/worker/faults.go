package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
)

// transientErr reports whether err is a fault that a retry may get past: no
// answer, no responders, a leader election, a disconnect.
func transientErr(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503 || apiErr.Code == 408 || apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled
	}
	return errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrTooManyStalledMsgs) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, context.DeadlineExceeded)
}

// ensureEvery bounds how often the worker re-creates what is missing.
const ensureEvery = 5 * time.Second

// ensure re-creates the streams and buckets the worker uses when a JetStream
// call failed, at most every ensureEvery: an operator's delete (or a lost
// stream) costs a few seconds of retries, not the runs. It is idempotent:
// what exists is left as it is.
func (w *Worker) ensure(ctx context.Context, cause error) {
	now := time.Now().UnixNano()
	last := w.lastEnsure.Load()
	if now-last < int64(ensureEvery) || !w.lastEnsure.CompareAndSwap(last, now) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ensureEvery)
	defer cancel()
	ns := w.cfg.Namespace
	err := events.EnsureStreams(ctx, w.js, ns, w.cfg.Streams)
	if err == nil {
		_, err = kv.Open(ctx, w.js, kv.Config{Namespace: ns, Replicas: w.cfg.Streams.Replicas})
	}
	if err != nil {
		w.log.WarnContext(ctx, "re-create streams and buckets after a failure", "cause", cause, "err", err)
	}
}
