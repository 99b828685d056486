// Package calls is the home of a run's calls to its caller (events.Call):
// a worker stores a call on the run's call subject and waits for the reply
// on its reply subject; a call server, the HTTP API or the CLI stores the
// reply. Both are events of the run, so an attempt that takes the run over
// finds the calls and replies earlier attempts stored (Read) instead of
// asking again, and a server skips a call that needs no answer (Settled).
package calls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// State is one call of a run with its reply (nil while pending) and where
// the call is stored in the events stream.
type State struct {
	Call      events.Call
	Reply     *events.Reply
	StreamSeq uint64
}

// Read returns the calls of the run of row in sequence order, each with the
// first reply stored for it. A call stored twice counts once.
func Read(ctx context.Context, js jetstream.JetStream, ns wire.Namespace, row *model.Row) ([]*State, error) {
	opts := events.ReplayOptions{
		StartSeq:  row.FirstEventSeq,
		StartTime: row.CreatedAt.Add(-time.Minute), // tolerate clock skew with the server
		Kinds:     []string{events.KindCall, events.KindReply},
		Follow:    events.HistoryOnly,
	}
	var out []*State
	bySeq := make(map[int64]*State)
	for ev, err := range wire.Replay(ctx, js, ns, row.ID, opts) {
		if err != nil {
			return nil, fmt.Errorf("calls: read the calls of run %s: %w", row.ID, err)
		}
		switch {
		case ev.Call != nil:
			if bySeq[ev.Call.Seq] != nil {
				continue // a copy stored twice: the first counts
			}
			st := &State{Call: *ev.Call, StreamSeq: ev.Seq}
			bySeq[ev.Call.Seq] = st
			out = append(out, st)
		case ev.Reply != nil:
			if st := bySeq[ev.Reply.Seq]; st != nil && st.Reply == nil {
				rp := *ev.Reply
				st.Reply = &rp
			}
		}
	}
	return out, nil
}

// AwaitReply follows run id's reply subject from the call stored at
// streamSeq on until the reply to call seq is stored, or ctx ends.
func AwaitReply(ctx context.Context, js jetstream.JetStream, ns wire.Namespace, id string, seq int64, streamSeq uint64) (*events.Reply, error) {
	opts := events.ReplayOptions{After: streamSeq, Kinds: []string{events.KindReply}, Follow: events.Forever}
	for ev, err := range wire.Replay(ctx, js, ns, id, opts) {
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, err
		}
		if ev.Reply != nil && ev.Reply.Seq == seq {
			return ev.Reply, nil
		}
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return nil, errors.New("calls: reply stream ended")
}

// StoreReply stores reply on its run's reply subject, retrying transient
// faults for at most retry; its message id makes a retried store count once.
func StoreReply(ctx context.Context, js jetstream.JetStream, ns wire.Namespace, reply events.Reply, retry time.Duration) error {
	data, err := json.Marshal(reply)
	if err != nil {
		return err
	}
	return jsfault.Retry(ctx, retry, func(ctx context.Context) error {
		subject, err := wire.PublishSubject(ctx, js, ns, reply.RunID, events.KindReply)
		if err != nil {
			return err
		}
		_, err = js.Publish(ctx, subject, data, jetstream.WithMsgID(wire.ReplyMsgID(reply.RunID, reply.Seq)))
		return err
	})
}

// NewReply is the reply to call seq (named name) of run runID, answered by
// by: output, or with errText set, a failure the run gets as an error value.
// An output EncodeOutput refuses is an error, and no reply.
func NewReply(runID string, seq int64, name string, output any, errText, by string) (events.Reply, error) {
	reply := events.Reply{RunID: runID, Seq: seq, Name: name, Error: errText, By: by, At: time.Now()}
	if errText == "" {
		raw, err := EncodeOutput(output)
		if err != nil {
			return events.Reply{}, err
		}
		reply.Output = raw
	}
	return reply, nil
}

// EncodeOutput is a reply's output as JSON: a json.RawMessage must be valid
// JSON, anything else is marshalled; at most events.MaxCallBytes.
func EncodeOutput(out any) (json.RawMessage, error) {
	var raw json.RawMessage
	switch v := out.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, errors.New("call output is not valid JSON")
		}
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("call output is not JSON-encodable: %w", err)
		}
		raw = b
	}
	if len(raw) > events.MaxCallBytes {
		return nil, fmt.Errorf("call output is %d bytes; the limit is %d", len(raw), events.MaxCallBytes)
	}
	return raw, nil
}

// Settled says why call, stored at streamSeq, needs no answer ("" when it
// does): it timed out, its run ended or is unknown, or it was answered.
func Settled(ctx context.Context, js jetstream.JetStream, ns wire.Namespace, store *runstore.Store, call *events.Call, streamSeq uint64) (string, error) {
	if call.TimeoutMs > 0 && time.Since(call.At) > time.Duration(call.TimeoutMs)*time.Millisecond {
		return "timed out", nil
	}
	row, _, err := store.Get(ctx, call.RunID)
	switch {
	case errors.Is(err, runstore.ErrRunNotFound):
		return "run not found", nil
	case err != nil:
		return "", err
	case row.Status.Final():
		return "run ended", nil
	}
	opts := events.ReplayOptions{After: streamSeq, Kinds: []string{events.KindReply}, Follow: events.HistoryOnly}
	for ev, err := range wire.Replay(ctx, js, ns, call.RunID, opts) {
		if err != nil {
			return "", err
		}
		if ev.Reply != nil && ev.Reply.Seq == call.Seq {
			return "answered", nil
		}
	}
	return "", nil
}
