package parent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/calls"
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
		raw, err := calls.EncodeOutput(output)
		if err != nil {
			return fmt.Errorf("parent: reply to run %s: %w", id, err)
		}
		reply.Output = raw
	}
	return calls.StoreReply(ctx, c.js, c.ns, reply, c.cfg.DispatchRetry)
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
	states, err := calls.Read(ctx, c.js, c.ns, row)
	if err != nil {
		return nil, fmt.Errorf("parent: %w", err)
	}
	out := make([]CallState, len(states))
	for i, st := range states {
		out[i] = CallState{Call: st.Call, Reply: st.Reply}
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
