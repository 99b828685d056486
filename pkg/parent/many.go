package parent

import (
	"context"
	"github.com/jetrun/jetrun/internal/engine/model"
	"slices"
	"sync"

	"github.com/jetrun/jetrun/pkg/events"
)

// DefaultDispatchManyInFlight is how many of DispatchMany's requests are
// in flight at once.
const DefaultDispatchManyInFlight = 256

// DispatchResult is the outcome of one request of DispatchMany.
type DispatchResult struct {
	// RunID is the request's run id (the generated one when it had none;
	// empty for a request refused before an id was chosen).
	RunID string
	// Dispatched is what [Client.Dispatch] returns for the request: the
	// run's row and whether this call started it (a nil Run when Err is
	// set).
	Dispatched
	// Err is why this request was not dispatched: the errors Dispatch
	// returns (ErrBadRequest, ErrUnknownAgentType, ErrRunIDConflict,
	// ErrDispatchFailed, ...), for this request alone.
	Err error
}

// DispatchMany dispatches many runs at once, for producers that enqueue
// thousands: result i is the outcome of reqs[i]. Each request is what
// Dispatch does with it (the same checks, the same idempotency by run id:
// dispatching the same batch again starts nothing new, and a run id given
// twice is one run), but the writes are pipelined: up to
// DefaultDispatchManyInFlight requests have their row read, dispatch
// publish and row create on the connection at once, and DispatchMany
// returns when every one has its acknowledgement (or its error). A bad
// request fails alone: the others are dispatched.
//
// Agent types are checked once per batch, before any write. ctx bounds
// the whole batch; a request not done when it ends has ctx's error.
func (c *Client) DispatchMany(ctx context.Context, reqs []Request) []DispatchResult {
	reqs = slices.Clone(reqs) // run ids are filled in: the caller's slice stays theirs
	out := make([]DispatchResult, len(reqs))
	known := make(map[string]error) // agent type → checkAgentType's answer
	for i := range reqs {
		req := &reqs[i]
		if req.RunID == "" {
			req.RunID = newRunID()
		}
		out[i].RunID = req.RunID
		if _, checked := known[req.AgentType]; !checked && events.ValidateToken("agent type", req.AgentType) == nil {
			known[req.AgentType] = c.checkAgentType(ctx, req.AgentType)
		}
	}

	// A bounded pool of goroutines, each taking the next request: the
	// requests' reads and writes overlap on the connection, so the batch
	// costs about its writes divided by the window, not one round trip
	// after another.
	var (
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range min(DefaultDispatchManyInFlight, len(reqs)) {
		wg.Go(func() {
			for i := range next {
				out[i] = c.dispatchOne(ctx, reqs[i], known[reqs[i].AgentType])
			}
		})
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// dispatchOne is Dispatch of req whose agent type check answered
// typeErr.
func (c *Client) dispatchOne(ctx context.Context, req Request, typeErr error) DispatchResult {
	res := DispatchResult{RunID: req.RunID}
	if err := ctx.Err(); err != nil {
		res.Err = err
		return res
	}
	if typeErr != nil {
		// A bad request says so first, as Dispatch does.
		if _, err := req.dispatch(); err != nil {
			res.Err = err
			return res
		}
		res.Err = typeErr
		return res
	}
	var row *model.Row
	row, res.Created, res.Err = c.dispatch(ctx, req)
	res.Run = row.View()
	return res
}
