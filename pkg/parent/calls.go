package parent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Call is a run's request to its caller (events.Call): its name, input,
// the run that asks and that run's parent.
type Call = events.Call

// Reply stores the answer to call seq of run id, as a call server does:
// output (any JSON-encodable value) or, with errText set, a failure the
// run gets as an error value. The first reply stored for a call counts.
func (c *Client) Reply(ctx context.Context, id string, seq int64, name string, output any, errText string) error {
	if err := events.ValidateID(id); err != nil {
		return fmt.Errorf("parent: reply: %w", err)
	}
	reply := events.Reply{RunID: id, Seq: seq, Name: name, Error: errText, By: callServerID(), At: time.Now()}
	if errText == "" {
		raw, err := encodeOutput(output)
		if err != nil {
			return fmt.Errorf("parent: reply to run %s: %w", id, err)
		}
		reply.Output = raw
	}
	return c.storeReply(ctx, reply)
}

func (c *Client) storeReply(ctx context.Context, reply events.Reply) error {
	data, err := json.Marshal(reply)
	if err != nil {
		return err
	}
	subject := c.ns.RunSubject(reply.RunID, events.KindReply)
	return jsfault.Retry(ctx, c.cfg.DispatchRetry, func(ctx context.Context) error {
		_, err := c.js.Publish(ctx, subject, data, jetstream.WithMsgID(wire.ReplyMsgID(reply.RunID, reply.Seq)))
		return err
	})
}

func encodeOutput(out any) (json.RawMessage, error) {
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

// callSettled says why a call needs no answer ("" when it does): it was
// answered already, its run ended, or it timed out.
func (c *Client) callSettled(ctx context.Context, call *Call, streamSeq uint64) (string, error) {
	if call.TimeoutMs > 0 && time.Since(call.At) > time.Duration(call.TimeoutMs)*time.Millisecond {
		return "timed out", nil
	}
	row, _, err := c.store.Get(ctx, call.RunID)
	switch {
	case errors.Is(err, runstore.ErrRunNotFound):
		return "run not found", nil
	case err != nil:
		return "", err
	case row.Status.Final():
		return "run ended", nil
	}
	opts := events.ReplayOptions{After: streamSeq, Kinds: []string{events.KindReply}, Follow: events.HistoryOnly}
	for ev, err := range wire.Replay(ctx, c.js, c.ns, call.RunID, opts) {
		if err != nil {
			return "", err
		}
		if ev.Reply != nil && ev.Reply.Seq == call.Seq {
			return "answered", nil
		}
	}
	return "", nil
}

// Calls returns a run's calls in order, each with its reply once
// answered (nil while pending), or ErrRunNotFound for an unknown run.
func (c *Client) Calls(ctx context.Context, id string) ([]CallState, error) {
	row, err := c.Inspect(ctx, id)
	if errors.Is(err, ErrRunNotFound) {
		return nil, fmt.Errorf("parent: calls of run %s: %w", id, ErrRunNotFound)
	}
	if err != nil {
		return nil, err
	}
	opts := events.ReplayOptions{
		StartSeq: row.FirstEventSeq, StartTime: row.CreatedAt.Add(-time.Minute),
		Kinds: []string{events.KindCall, events.KindReply}, Follow: events.HistoryOnly,
	}
	var out []CallState
	idx := make(map[int64]int)
	for ev, err := range wire.Replay(ctx, c.js, c.ns, id, opts) {
		if err != nil {
			return nil, fmt.Errorf("parent: calls of run %s: %w", id, err)
		}
		switch {
		case ev.Call != nil:
			if _, dup := idx[ev.Call.Seq]; !dup {
				idx[ev.Call.Seq] = len(out)
				out = append(out, CallState{Call: *ev.Call})
			}
		case ev.Reply != nil:
			if i, ok := idx[ev.Reply.Seq]; ok && out[i].Reply == nil {
				r := *ev.Reply
				out[i].Reply = &r
			}
		}
	}
	return out, nil
}

// CallState is one call of a run and its reply (nil while pending).
type CallState struct {
	Call  Call          `json:"call"`
	Reply *events.Reply `json:"reply,omitempty"`
}

var (
	serverIDOnce sync.Once
	serverID     string
)

// callServerID names this process on the replies it stores.
func callServerID() string {
	serverIDOnce.Do(func() {
		host, _ := os.Hostname()
		serverID = host + "-" + strconv.Itoa(os.Getpid())
	})
	return serverID
}

// Errors of AnswerCall; test with errors.Is.
var (
	// ErrCallNotFound is returned by AnswerCall for a call the run never
	// made.
	ErrCallNotFound = errors.New("no such call")
	// ErrCallAnswered is returned by AnswerCall for a call that has a
	// reply already.
	ErrCallAnswered = errors.New("call answered already")
)

// AnswerCall answers call seq of run id by hand (the HTTP API and the CLI
// do): output, or errText for a failure the run gets as an error value. It
// returns ErrRunEnded for a run that ended, ErrCallNotFound, or
// ErrCallAnswered; a reply stored by someone else at the same moment may
// still come first (the first stored counts).
func (c *Client) AnswerCall(ctx context.Context, id string, seq int64, output any, errText string) (*CallState, error) {
	row, err := c.Inspect(ctx, id)
	switch {
	case errors.Is(err, ErrRunNotFound):
		return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrRunNotFound)
	case err != nil:
		return nil, err
	case row.Status.Final():
		return nil, fmt.Errorf("parent: answer call %d of run %s: %w (%s)", seq, id, ErrRunEnded, row.Status)
	}
	calls, err := c.Calls(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, cs := range calls {
		if cs.Call.Seq != seq {
			continue
		}
		if cs.Reply != nil {
			return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrCallAnswered)
		}
		if err := c.Reply(ctx, id, seq, cs.Call.Name, output, errText); err != nil {
			return nil, err
		}
		return &cs, nil
	}
	return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrCallNotFound)
}
