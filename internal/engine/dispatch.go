package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// DispatchOptions says how PublishDispatch publishes a dispatch.
type DispatchOptions struct {
	// MsgID is the Nats-Msg-Id: a dispatch re-published with the same id
	// within the stream's dedup window is stored once. Default: the run id.
	MsgID string
	// RowAfter marks a dispatch whose row is created after it
	// (events.HeaderRowAfter): a worker that finds no row waits for it.
	RowAfter bool
	// Retry bounds how long transient faults are retried (and a deleted
	// stream re-created, see Repair). Zero: one try.
	Retry time.Duration
	// Requeue publishes the dispatch again, under a new id, when the dedup
	// window answers with a copy that is no longer queued (consumed, or
	// deleted by a clear): the caller wants a dispatch in the queue, not
	// a record that one was sent.
	Requeue bool
}

// Published is where PublishDispatch's dispatch is.
type Published struct {
	// Seq is its dispatch stream sequence.
	Seq uint64
	// Duplicate says the dedup window found a copy stored before; Seq is
	// that copy's.
	Duplicate bool
}

// PublishDispatch publishes d on agentType's dispatch subject.
func (rt *Runtime) PublishDispatch(ctx context.Context, agentType string, d events.Dispatch, o DispatchOptions) (Published, error) {
	msg, err := rt.dispatchMsg(agentType, d, o.RowAfter)
	if err != nil {
		return Published{}, err
	}
	base := cmp.Or(o.MsgID, d.RunID)
	id := base
	var out Published
	publish := func() error {
		msg.Header.Set(jetstream.MsgIDHeader, id)
		ack, err := rt.pub.Publish(ctx, msg)
		if err != nil && !jsfault.IsTransient(ctx, err) && !jsfault.IsMissing(err) {
			return backoff.Permanent(err) // too large, refused: retrying changes nothing
		}
		if err != nil {
			if o.Retry > 0 {
				_ = rt.Repair(ctx) // a deleted stream answers "no responders"
			}
			return err
		}
		if ack.Duplicate && o.Requeue {
			queued, err := rt.DispatchQueued(ctx, ack.Sequence)
			if err != nil {
				return err
			}
			if !queued {
				id = base + "." + strconv.FormatInt(time.Now().UnixNano(), 36)
				return errors.New("dispatch deduplicated against one that is gone")
			}
		}
		out = Published{Seq: ack.Sequence, Duplicate: ack.Duplicate}
		return nil
	}
	if o.Retry <= 0 {
		err = publish()
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			err = perm.Err
		}
	} else {
		b := backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(50*time.Millisecond),
			backoff.WithMaxElapsedTime(o.Retry),
		)
		err = backoff.Retry(publish, backoff.WithContext(b, ctx))
	}
	if err != nil {
		return Published{}, fmt.Errorf("jetrun: publish dispatch of run %s: %w", d.RunID, err)
	}
	return out, nil
}

// PublishDispatchAsync sends d's dispatch (Nats-Msg-Id = run id) without
// waiting; the returned function waits, at most timeout, for its
// acknowledgement. Any failure, or a duplicate, is an error there: the
// caller falls back on PublishDispatch, which sorts those out. Many sent
// one after another are on the connection at once (DispatchMany).
func (rt *Runtime) PublishDispatchAsync(agentType string, d events.Dispatch, rowAfter bool, timeout time.Duration) func(context.Context) (uint64, error) {
	msg, err := rt.dispatchMsg(agentType, d, rowAfter)
	if err != nil {
		return func(context.Context) (uint64, error) { return 0, err }
	}
	msg.Header.Set(jetstream.MsgIDHeader, d.RunID)
	q := rt.pub.Send(msg)
	return func(ctx context.Context) (uint64, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ack, err := q.Ack(ctx)
		switch {
		case err != nil:
			return 0, err
		case ack.Duplicate:
			return 0, errors.New("duplicate dispatch")
		}
		return ack.Sequence, nil
	}
}

// dispatchMsg is d's message on agentType's dispatch subject, with d's
// trace headers.
func (rt *Runtime) dispatchMsg(agentType string, d events.Dispatch, rowAfter bool) (*nats.Msg, error) {
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("jetrun: encode dispatch of run %s: %w", d.RunID, err)
	}
	msg := &nats.Msg{Subject: rt.cfg.Namespace.DispatchSubject(agentType), Data: data, Header: nats.Header{}}
	wire.SetTraceHeaders(wire.DispatchTrace(d), msg.Header)
	if rowAfter {
		msg.Header.Set(events.HeaderRowAfter, "1")
	}
	return msg, nil
}

// DispatchQueued reports whether the dispatch at seq is still in the
// dispatch stream (queued, or held by a worker).
func (rt *Runtime) DispatchQueued(ctx context.Context, seq uint64) (bool, error) {
	_, err := rt.dispatch.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("jetrun: look up dispatch %d: %w", seq, err)
	}
	return true, nil
}
