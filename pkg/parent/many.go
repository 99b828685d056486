package parent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// DefaultDispatchManyInFlight is how many of DispatchMany's requests are
// in flight at once.
const DefaultDispatchManyInFlight = 256

// A plain run of DispatchMany (a top-level run, not detached, without a
// budget, a concurrency key, MaxConcurrent or an approval) is dispatched in
// a chunk of manyChunk such runs: their rows' reads sent together, then
// each one's dispatch with its row's create right behind it, then every
// answer awaited. manyPipelines chunks are in flight at once.
const (
	manyChunk     = 256
	manyPipelines = 4
)

// DispatchResult is the outcome of one request of DispatchMany.
type DispatchResult struct {
	// RunID is the request's run id (the generated one when it had none;
	// empty for a request refused before an id was chosen).
	RunID string
	// Dispatched is what [Client.Dispatch] returns for the request: the
	// run's row and whether this call started it (a nil Run when Err is
	// set, or when a person refused the request's Approval: Rejected is
	// then the answer, a result and not an error, as Dispatch's).
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
// twice for one agent type is one run, written once, whose later request
// answers as its first with Created false), but the writes are pipelined: the rows of a chunk of
// runs are read together, then every run's dispatch and row create are
// sent, one right after the other, and only then are their
// acknowledgements awaited, a few chunks at once; a run that needs more
// than a dispatch and a row (a parent, a budget, a concurrency key, ...)
// is dispatched as Dispatch does, up to DefaultDispatchManyInFlight of
// them at once. DispatchMany returns when every request has its
// acknowledgement (or its error). A bad request fails alone: the others
// are dispatched.
//
// Agent types are checked once per batch, before any write. ctx bounds
// the whole batch; a request not done when it ends has ctx's error.
func (c *Client) DispatchMany(ctx context.Context, reqs []Request) []DispatchResult {
	reqs = slices.Clone(reqs) // run ids are filled in: the caller's slice stays theirs
	out := make([]DispatchResult, len(reqs))
	known := make(map[string]error) // agent type → checkAgentType's answer
	first := make(map[string]int)   // run id → its first request
	var again []int                 // requests whose run id an earlier one of the same agent type has
	for i := range reqs {
		req := &reqs[i]
		if req.RunID == "" {
			req.RunID = newRunID()
		}
		out[i].RunID = req.RunID
		if f, seen := first[req.RunID]; seen && reqs[f].AgentType == req.AgentType {
			again = append(again, i)
			continue
		}
		first[req.RunID] = i
		if _, checked := known[req.AgentType]; !checked && events.ValidateToken("agent type", req.AgentType) == nil {
			known[req.AgentType] = c.checkAgentType(ctx, req.AgentType)
		}
	}

	// Plain runs go in chunks through the pipelines; the rest, and plain
	// runs that turn out to have a row already, through a bounded pool of
	// goroutines, each taking the next request.
	var (
		plains []int
		ds     = make([]events.Dispatch, len(reqs))
		others = make(chan manyOther)
		pool   sync.WaitGroup
	)
	for range min(DefaultDispatchManyInFlight, len(reqs)) {
		pool.Go(func() {
			for o := range others {
				out[o.i] = c.dispatchOther(ctx, reqs[o.i], known[reqs[o.i].AgentType], o)
			}
		})
	}
	for i := range reqs {
		if f := first[reqs[i].RunID]; f != i && reqs[f].AgentType == reqs[i].AgentType {
			continue // one run: it answers as its first request
		}
		d, ok := c.preparePlain(ctx, reqs[i], known[reqs[i].AgentType])
		if !ok {
			others <- manyOther{i: i}
			continue
		}
		ds[i] = d
		plains = append(plains, i)
	}
	var pipes sync.WaitGroup
	chunks := make(chan []int)
	for range min(manyPipelines, (len(plains)+manyChunk-1)/manyChunk) {
		pipes.Go(func() {
			for chunk := range chunks {
				c.dispatchChunk(ctx, reqs, ds, chunk, out, others)
			}
		})
	}
	for chunk := range slices.Chunk(plains, manyChunk) {
		chunks <- chunk
	}
	close(chunks)
	pipes.Wait()
	close(others)
	pool.Wait()
	for _, i := range again {
		out[i] = out[first[reqs[i].RunID]]
		out[i].Created = false // the same run: started once, by its first request
	}
	return out
}

// manyOther is a request of DispatchMany dispatched one at a time: i is its
// index; a plain request whose read found its row carries it (row), or
// its prepared dispatch when the read failed (d, prepared).
type manyOther struct {
	i        int
	row      *model.Row
	d        events.Dispatch
	prepared bool
}

// preparePlain prepares req when it is a plain run (see plain) whose
// agent type checked fine (typeErr nil) and needs no approval: ok false
// otherwise, for the one-at-a-time path, which says what is wrong.
func (c *Client) preparePlain(ctx context.Context, req Request, typeErr error) (events.Dispatch, bool) {
	if typeErr != nil || req.Approval != nil || ctx.Err() != nil {
		return events.Dispatch{}, false
	}
	d, err := req.dispatch()
	if err != nil || req.ConcurrencyKey != "" || req.MaxConcurrent > 0 || !plain(d) {
		return d, false
	}
	d, err = c.prepare(ctx, req)
	return d, err == nil
}

// dispatchChunk dispatches the plain runs reqs[i] (dispatch ds[i]) of
// chunk: every row read is sent, then, as each answers "no row", the run's
// dispatch and its row's create; then each is settled as Dispatch settles
// it. A run with a row, or whose read failed, goes to others.
func (c *Client) dispatchChunk(ctx context.Context, reqs []Request, ds []events.Dispatch, chunk []int, out []DispatchResult, others chan<- manyOther) {
	reads := c.readChunk(ctx, ds, chunk)
	sent := make([]sentPlain, len(chunk))
	var fresh []int
	for k, i := range chunk {
		row, _, err := reads[k](ctx)
		switch {
		case err == nil:
			others <- manyOther{i: i, row: row}
		case errors.Is(err, runstore.ErrRunNotFound):
			sent[k] = c.sendPlain(reqs[i], ds[i])
			fresh = append(fresh, k)
		default:
			others <- manyOther{i: i, d: ds[i], prepared: true} // read again, with retries
		}
	}
	for _, k := range fresh {
		i := chunk[k]
		row, created, err := c.settlePlain(ctx, reqs[i], ds[i], sent[k])
		out[i] = DispatchResult{RunID: reqs[i].RunID, Dispatched: Dispatched{Run: row.View(), Created: created}, Err: err}
	}
}

// readChunk reads the rows of the runs ds[i] of chunk: with one batched
// read, or, when that fails, each read sent at once and awaited in turn.
// Result k answers for chunk[k], as Lookup does.
func (c *Client) readChunk(ctx context.Context, ds []events.Dispatch, chunk []int) []func(context.Context) (*model.Row, uint64, error) {
	reads := make([]func(context.Context) (*model.Row, uint64, error), len(chunk))
	ids := make([]string, len(chunk))
	for k, i := range chunk {
		ids[k] = ds[i].RunID
	}
	found, err := c.store.LookupMany(ctx, ids)
	if err != nil {
		for k, id := range ids {
			reads[k] = c.store.LookupLater(id)
		}
		return reads
	}
	for k, id := range ids {
		reads[k] = func(context.Context) (*model.Row, uint64, error) {
			if r, ok := found[id]; ok {
				return r.Row, r.Rev, nil
			}
			return nil, 0, fmt.Errorf("parent: dispatch run %s: %w", id, runstore.ErrRunNotFound)
		}
	}
	return reads
}

// dispatchOther dispatches a request of DispatchMany one at a time (o).
func (c *Client) dispatchOther(ctx context.Context, req Request, typeErr error, o manyOther) DispatchResult {
	res := DispatchResult{RunID: req.RunID}
	var row *model.Row
	switch {
	case ctx.Err() != nil:
		res.Err = ctx.Err()
		return res
	case o.row != nil:
		row, res.Err = c.existing(ctx, o.row, req)
	case o.prepared:
		row, res.Created, res.Err = c.dispatchPrepared(ctx, req, o.d)
	default:
		return c.dispatchOne(ctx, req, typeErr)
	}
	res.Run = row.View()
	return res
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
	row, created, err := c.dispatch(ctx, req)
	var refused *rejected
	if errors.As(err, &refused) {
		res.Rejected = refused.answer // a result, as Dispatch's: not an error
		return res
	}
	res.Run, res.Created, res.Err = row.View(), created, err
	return res
}
