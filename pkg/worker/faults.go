package worker

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
