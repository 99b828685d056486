package parent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/calls"
	"github.com/jetrun/jetrun/pkg/events"
)

// Call is a run's request to its caller (events.Call): its name, input,
// the run that asks and that run's parent.
type Call = events.Call

// Calls returns a run's calls in order, each with its reply once
// answered (nil while pending), or ErrRunNotFound for an unknown run.
func (c *Client) Calls(ctx context.Context, id string) ([]CallState, error) {
	row, err := c.stored(ctx, id)
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

// Errors of [Client.Answer]; test with errors.Is.
var (
	// ErrCallNotFound is returned by Answer for a call the run never made.
	ErrCallNotFound = errors.New("no such call")
	// ErrCallAnswered is returned by Answer for a call that has a reply
	// already.
	ErrCallAnswered = errors.New("call answered already")
)

// Answer answers call seq of run id by hand, as a [CallServer] answers the
// calls it serves: output (any JSON-encodable value; json.RawMessage passes
// through) or, with errText set, a failure the run gets as an error value
// ([worker.CallError]). It returns the call, or [ErrRunNotFound],
// [ErrRunEnded] for a run that ended, [ErrCallNotFound], [ErrCallAnswered],
// or [ErrBadRequest] for an output that cannot be sent. Two answers given at
// the same moment may both succeed: the first one stored is the one the run
// gets.
//
// [worker.CallError]: https://pkg.go.dev/github.com/jetrun/jetrun/pkg/worker#CallError
func (c *Client) Answer(ctx context.Context, id string, seq int64, output any, errText string) (*CallState, error) {
	row, err := c.stored(ctx, id)
	switch {
	case errors.Is(err, ErrRunNotFound):
		return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrRunNotFound)
	case err != nil:
		return nil, err
	case row.Status.Final():
		return nil, fmt.Errorf("parent: answer call %d of run %s: %w (%s)", seq, id, ErrRunEnded, row.Status)
	}
	states, err := c.Calls(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, cs := range states {
		if cs.Call.Seq != seq {
			continue
		}
		if cs.Reply != nil {
			return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrCallAnswered)
		}
		reply, err := calls.NewReply(id, seq, cs.Call.Name, output, errText, callServerID())
		if err != nil {
			return nil, fmt.Errorf("parent: answer call %d of run %s: %w: %w", seq, id, ErrBadRequest, err)
		}
		if handled, err := c.answerAsk(ctx, reply); handled || err != nil {
			if err != nil {
				return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, err)
			}
			return &cs, nil
		}
		if err := calls.StoreReply(ctx, c.js, c.ns, reply, c.cfg.DispatchRetry); err != nil {
			return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, err)
		}
		return &cs, nil
	}
	return nil, fmt.Errorf("parent: answer call %d of run %s: %w", seq, id, ErrCallNotFound)
}

// answerAsk answers a call that is an ask (worker.Ask) through its ask,
// so the first answer wins whichever way it comes (the inbox, a reply):
// handled is false for a call that is no ask, or an error reply (a reply
// stored as it is).
func (c *Client) answerAsk(ctx context.Context, reply events.Reply) (handled bool, err error) {
	if reply.Error != "" {
		return false, nil
	}
	st := c.rt.Asks()
	a, _, err := st.Get(ctx, asks.CallID(reply.RunID, reply.Seq))
	switch {
	case errors.Is(err, asks.ErrNotFound):
		return false, nil
	case err != nil:
		return true, err
	}
	answered, err := st.Answer(ctx, a.ID, a.Digest, reply.Output, reply.By)
	var bad *asks.ValueError
	switch {
	case errors.Is(err, asks.ErrAnswered):
		return true, ErrCallAnswered
	case errors.Is(err, asks.ErrClosed) || errors.Is(err, asks.ErrStale):
		return false, nil // the wait ended or moved on: store the reply as it is
	case errors.As(err, &bad):
		return true, fmt.Errorf("%w: %w", ErrBadRequest, err)
	case err != nil:
		return true, err
	}
	_, err = st.Deliver(ctx, answered)
	return true, err
}
