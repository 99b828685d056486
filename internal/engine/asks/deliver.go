package asks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/calls"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// deliverRetry bounds the retries of a transient fault while delivering.
const deliverRetry = 10 * time.Second

// Deliver sends ask a's answer to its run and records it delivered. It is
// idempotent: a signal is stored only when none is stored for the wait yet
// (the first one after a.After; its message id, derived from the ask's,
// also dedups two deliverers at once), and a call's first stored reply is
// the one the run gets. An ask with nothing owed is left as it is.
func (s *Store) Deliver(ctx context.Context, a *events.Ask) (*events.Ask, error) {
	if !Owed(a) {
		return a, nil
	}
	var err error
	switch a.Via {
	case events.AskViaSignal:
		err = s.deliverSignal(ctx, a)
	case events.AskViaCall:
		var reply events.Reply
		reply, err = calls.NewReply(a.RunID, a.CallSeq, a.Name, a.Answer.Value, "", a.Answer.By)
		if err == nil {
			err = calls.StoreReply(ctx, s.js, s.ns, reply, deliverRetry)
		}
	case events.AskViaDispatch:
		// The dispatcher reads the answer from the ask.
	default:
		err = fmt.Errorf("unknown way %q", a.Via)
	}
	if err != nil {
		return nil, fmt.Errorf("asks: deliver the answer of ask %s: %w", a.ID, err)
	}
	return s.markDelivered(ctx, a.ID)
}

// deliverSignal stores a's answer as the signal its run waits for, unless
// a signal for that wait is stored already.
func (s *Store) deliverSignal(ctx context.Context, a *events.Ask) error {
	subject := s.ns.SignalSubject(a.RunID, a.Name)
	_, err := s.signals.GetMsg(ctx, a.After+1, jetstream.WithGetMsgSubject(subject))
	switch {
	case err == nil:
		return nil // the wait has its signal (ours, stored before a crash, or another)
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return fmt.Errorf("read signals of run %s: %w", a.RunID, err)
	}
	_, err = s.js.Publish(ctx, subject, a.Answer.Value, jetstream.WithMsgID(wire.AskSignalMsgID(a.ID)))
	return err
}
