package parent

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/kv"
)

// Defaults used where Config leaves a field zero.
const (
	DefaultDispatchRetry  = 10 * time.Second
	DefaultAgentTypeCache = time.Minute
	// DefaultReattachNoProgress is how long an Await waits without any sign
	// of progress from the run before it gives up (the run goes on).
	DefaultReattachNoProgress = 2 * time.Minute
)

// Errors returned by Client methods; test with errors.Is.
var (
	// ErrUnknownAgentType is returned by Dispatch and Run when no worker has
	// ever registered the agent type (its consumer does not exist).
	ErrUnknownAgentType = errors.New("unknown agent type")
	// ErrRunIDConflict is returned by Dispatch and Run when the run id is
	// taken by a run of another agent type.
	ErrRunIDConflict = errors.New("run id belongs to a run of another agent type")
	// ErrDispatchFailed is returned by Dispatch and Run when the dispatch
	// could not be published; the run's row then ends "error" with reason
	// "dispatch-failed" (when that write is possible), unless the caller's
	// context ended first: the dispatch may have landed, and the run is
	// left "starting" for a worker or the reconciler.
	ErrDispatchFailed = errors.New("dispatch failed")
	// ErrBadRequest is returned (wrapped) for an invalid Request.
	ErrBadRequest = errors.New("bad request")
	// ErrConcurrencyLimit is returned by Dispatch and Run when the parent
	// already has Request.MaxConcurrent live children; the run id is not
	// used, so the same request can be made again later.
	ErrConcurrencyLimit = errors.New("parent's concurrency limit reached")
	// ErrRunNotFound is returned (wrapped) for a run id with no row (never
	// dispatched, or cleared): by Inspect, Await, Cancel, Steps, Calls …
	ErrRunNotFound = jetruntype.ErrRunNotFound
)

// Failure is the value a run that did not complete yields: [Client.Run] and
// [Client.Await] return it as their error (find it with errors.As), with OK
// false, the status, the error text, whether a retry could help (only for
// interrupted), the reason and whether the child may still be running.
type Failure = jetruntype.Failure

// Config configures a Client. Zero values mean defaults.
type Config struct {
	// DispatchRetry bounds how long a failing dispatch publish is retried
	// (default 10s).
	DispatchRetry time.Duration
	// MaxDepth is the deepest nesting accepted (Request.Depth), and how deep
	// a cancel cascades (default 8).
	MaxDepth int
	// AllowUnknownAgentTypes skips the check that a worker has registered
	// the agent type; the dispatch then waits in the stream for one.
	AllowUnknownAgentTypes bool
	// ReattachNoProgress is how long Await and Run wait without a sign of
	// progress from the run (a chunk, progress, a milestone, a signal, a
	// status change; waiting for a signal counts as progress) before they
	// give up with the soft failure interrupted / no-progress and
	// childStillRunning true. The run goes on: awaiting its id again
	// re-attaches (default 2m; negative: never give up).
	ReattachNoProgress time.Duration
	// ReattachMaxWindow, when positive, is the most Await and Run wait in
	// all: past it the run is given up (interrupted / window-exceeded) and
	// its child stopped (default: no limit).
	ReattachMaxWindow time.Duration
	// Logger receives the client's logs (default: discard).
	Logger *slog.Logger
}

// Client is the parent side: it dispatches runs, awaits, inspects and
// cancels them. It is safe for concurrent use.
type Client struct {
	cfg   Config
	rt    *engine.Runtime
	js    jetstream.JetStream
	ns    wire.Namespace
	store *runstore.Store
	runs  *kv.Runs // the rows' reads, as every reader makes them
	log   *slog.Logger

	statuses statusFollower // wakes Awaits
	logs     obs.Throttle   // warnings about JetStream faults, per message and class

	mu     sync.Mutex
	agents map[string]time.Time // agent types seen registered, until when
	// schemas holds the input schemas of the agent registry.
	schemas *registry.Cache
}

// validate reports every invalid field at once.
func (c Config) validate() error {
	var errs []error
	if c.DispatchRetry < 0 {
		errs = append(errs, fmt.Errorf("dispatch retry must not be negative, got %s", c.DispatchRetry))
	}
	if c.MaxDepth < 0 {
		errs = append(errs, fmt.Errorf("max depth must not be negative, got %d", c.MaxDepth))
	}
	return errors.Join(errs...)
}

// New returns a Client on rt. It does no I/O: rt (jetrun.Open) created the
// streams and buckets.
func New(runtime *jetrun.Runtime, cfg Config) (*Client, error) {
	rt := engine.From(runtime)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("parent: config: %w", err)
	}
	cfg.DispatchRetry = cmp.Or(cfg.DispatchRetry, DefaultDispatchRetry)
	cfg.MaxDepth = cmp.Or(cfg.MaxDepth, events.DefaultMaxDepth)
	cfg.ReattachNoProgress = cmp.Or(cfg.ReattachNoProgress, DefaultReattachNoProgress)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		cfg: cfg, rt: rt, js: rt.JetStream(), ns: rt.Namespace(), store: rt.Store(), runs: kv.New(runtime), log: cfg.Logger,
		agents: make(map[string]time.Time), schemas: registry.NewCache(rt.JetStream(), rt.Namespace()),
	}
	c.statuses.c = c
	return c, nil
}

// Request describes a run to dispatch.
type Request struct {
	// AgentType names the handler that runs it. Required.
	AgentType string
	// RunID identifies the run; dispatching or awaiting the same id again
	// never starts a second execution. Default: a random id. Use [RunID]
	// to derive a stable one from a tool call.
	RunID string
	// Input is the run's input: any JSON-encodable value (json.RawMessage
	// passes through). Required.
	Input any
	// Parent is the id of the run dispatching this one, if any.
	Parent string
	// ParentToolCallID is the parent's tool call this run answers.
	ParentToolCallID string
	// DisplayOrder orders sibling runs in a UI.
	DisplayOrder int
	// Depth is how deeply nested the run is (0 at the top).
	Depth int
	// Detached makes the run outlive its parent's attention.
	Detached *events.Detached
	// MaxConcurrent, with Parent set, caps the parent's live (starting or
	// running) children: over the cap Dispatch fails fast with
	// ErrConcurrencyLimit. 0 means no cap.
	MaxConcurrent int
	// Trace is the W3C trace context the run carries: on its row, as
	// headers on its dispatch, events and finish, and in its handler's
	// context (the worker package's TraceContext). A malformed one is
	// dropped.
	Trace events.TraceContext
	// ConcurrencyKey, when set, makes runs under the same key never execute
	// at the same time (say one chat session); Strategy says what a submit
	// does while a run of the key is live or queued (default queue; with
	// [events.StrategyDrop], a busy key is [ErrKeyBusy]), and Debounce is
	// the quiet window of strategy debounce (default 750ms).
	ConcurrencyKey string
	Strategy       events.Strategy
	Debounce       time.Duration
	// Budget bounds what the run and every run nested under it spend
	// ([events.TreeBudget]). A nested run draws from the budgets of its
	// ancestors as well as its own; one they do not allow is
	// [ErrBudgetExceeded].
	Budget *events.TreeBudget
	// Session makes the run a turn of a sub-agent session: runs of one
	// agent type under one session see its earlier turns as their history
	// (the worker package's Run.History).
	Session string
	// Tenant is whose run this is: its fair share of the provider limits
	// it reserves on ([events.Dispatch] Tenant).
	Tenant string
	// Approval, with a Parent, makes the run need a person's approval
	// before it is dispatched ([Approval]).
	Approval *Approval
}

func (req Request) dispatch() (events.Dispatch, error) {
	var errs []error
	if err := events.ValidateToken("agent type", req.AgentType); err != nil {
		errs = append(errs, err)
	}
	var input json.RawMessage
	switch in := req.Input.(type) {
	case nil:
	case json.RawMessage:
		if !json.Valid(in) {
			errs = append(errs, errors.New("input is not valid JSON"))
		}
		input = in
	default:
		b, err := json.Marshal(in)
		if err != nil {
			errs = append(errs, fmt.Errorf("input is not JSON-encodable: %w", err))
		}
		input = b
	}
	d := events.Dispatch{
		RunID:            req.RunID,
		Input:            input,
		Parent:           req.Parent,
		ParentToolCallID: req.ParentToolCallID,
		DisplayOrder:     req.DisplayOrder,
		Depth:            req.Depth,
		Detached:         req.Detached,
		Budget:           req.Budget,
		Session:          req.Session,
		Tenant:           req.Tenant,
	}
	wire.SetTrace(&d, req.Trace.Valid())
	errs = append(errs, req.keyed(&d)...)
	if d.RunID == "" {
		d.RunID = newRunID()
	}
	if req.MaxConcurrent < 0 {
		errs = append(errs, fmt.Errorf("maxConcurrent must not be negative, got %d", req.MaxConcurrent))
	}
	if req.MaxConcurrent > 0 && req.Parent == "" {
		errs = append(errs, errors.New("maxConcurrent needs a parent"))
	}
	if err := d.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return d, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return d, nil
}

// newRunID returns a random run id.
func newRunID() string {
	return "r" + strings.ToLower(rand.Text()[:20])
}

// Dispatched is what [Client.Dispatch] returns.
type Dispatched struct {
	// Run is the run's row: "starting", or further along if a worker was
	// quick; for a run id that already had a run, that run as it is.
	Run *jetruntype.Run
	// Created says this call started the run (false: the run id already
	// had a run, which Run is).
	Created bool
	// Rejected is the person's answer when Request.Approval was refused:
	// nothing was dispatched (Run is nil).
	Rejected json.RawMessage
}

// Dispatch starts a run and returns its row.
//
// It is idempotent by run id: a run id that has a run never starts a
// second one; Dispatch then returns that run (re-attached if it is live, as
// stored if it ended), with [Dispatched.Created] false. No run is left that
// never starts: a caller that dies mid-dispatch leaves a dispatch a worker
// takes, or a "starting" row the reconciler (or a Dispatch of the same id)
// dispatches again. A dispatch that cannot be published ends the run
// "error" (reason "dispatch-failed") and returns [ErrDispatchFailed]; a
// caller whose context ends meanwhile leaves it "starting", as if it died.
func (c *Client) Dispatch(ctx context.Context, req Request) (*Dispatched, error) {
	row, created, err := c.dispatch(ctx, req)
	var refused *rejected
	if errors.As(err, &refused) {
		return &Dispatched{Rejected: refused.answer}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Dispatched{Run: row.View(), Created: created}, nil
}

// dispatch is Dispatch: the row, and whether this call created it. A
// top-level run that is not detached (no Parent, Detached, Budget,
// MaxConcurrent or ConcurrencyKey) has its dispatch sent first and its
// row's create right behind it, both awaited together (dispatchPlain): a
// caller that dies between the two leaves a dispatch, which a worker turns
// into a row. Every other run gets its row (and active-run index entries)
// first, then the dispatch: a caller that dies between those leaves a
// "starting" row whose dispatch the reconciler publishes. The dispatch is
// published with Nats-Msg-Id = run id, retried with backoff for
// DispatchRetry.
func (c *Client) dispatch(ctx context.Context, req Request) (row *model.Row, created bool, err error) {
	d, err := c.prepare(ctx, req)
	if err != nil {
		return nil, false, err
	}
	return c.dispatchPrepared(ctx, req, d)
}

// prepare checks req (and asks for its approval) and returns its dispatch
// with the run's tree filled in.
func (c *Client) prepare(ctx context.Context, req Request) (events.Dispatch, error) {
	d, err := req.dispatch()
	if err != nil {
		return d, err
	}
	if d.Depth > c.cfg.MaxDepth {
		return d, fmt.Errorf("%w: depth %d exceeds the maximum nesting depth %d", ErrBadRequest, d.Depth, c.cfg.MaxDepth)
	}
	if err := c.checkAgentType(ctx, req.AgentType); err != nil {
		return d, err
	}
	if err := c.checkInput(ctx, req.AgentType, d.Input); err != nil {
		return d, err
	}
	if req.Approval != nil {
		if err := c.approve(ctx, req, d); err != nil {
			return d, err
		}
	}
	if err := c.fillTree(ctx, &d, engine.ParentRow(ctx)); err != nil {
		return d, err
	}
	return d, nil
}

// plain reports whether a run whose dispatch is d, with no concurrency key
// and past its MaxConcurrent slot if any, is dispatched by dispatchPlain.
func plain(d events.Dispatch) bool {
	return d.Parent == "" && d.Detached == nil && d.Budget == nil
}

// dispatchPrepared is dispatch of req once prepared: d is its dispatch.
func (c *Client) dispatchPrepared(ctx context.Context, req Request, d events.Dispatch) (row *model.Row, created bool, err error) {
	if req.ConcurrencyKey != "" {
		return c.dispatchKeyed(ctx, req, d)
	}
	if req.MaxConcurrent > 0 {
		// An existing run is re-attached without a slot; a new one needs one.
		if existing, _, err := c.lookup(ctx, d.RunID); err == nil {
			row, err := c.existing(ctx, existing, req)
			return row, false, err
		}
		if err := c.acquireSlot(ctx, d.Parent, req.MaxConcurrent, d.RunID); err != nil {
			return nil, false, err
		}
	}
	if plain(d) {
		return c.dispatchPlain(ctx, req, d)
	}
	row = model.NewRun(req.AgentType, d, 0, time.Now())
	err = jsfault.RetryRepair(ctx, c.cfg.DispatchRetry, c.rt.Repair, func(ctx context.Context) error {
		_, err := c.store.Create(ctx, row)
		return err
	})
	if err != nil {
		if !errors.Is(err, runstore.ErrRunExists) {
			return nil, false, fmt.Errorf("parent: dispatch run %s: %w", d.RunID, err)
		}
		existing, _, err := c.get(ctx, d.RunID)
		if err != nil {
			return nil, false, fmt.Errorf("parent: dispatch run %s: %w", d.RunID, err)
		}
		row, err := c.existing(ctx, existing, req)
		return row, false, err
	}
	if _, err := c.publishDispatch(ctx, req.AgentType, d, d.RunID); err != nil {
		if ctx.Err() == nil {
			c.failDispatch(ctx, row.ID, err)
		}
		// Else the caller left: the dispatch may have landed, and if it did
		// not, the reconciler publishes the dispatch of a run left starting.
		return nil, false, fmt.Errorf("parent: dispatch run %s: %w: %w", d.RunID, ErrDispatchFailed, err)
	}
	return row, true, nil
}

// dispatchPlain dispatches a top-level run that is not detached: the
// dispatch, then the row (unindexed, as a worker creates it for a plain
// publish), both in flight at once, so the row is almost always stored by
// the time a worker reads it and the call costs one round trip for both.
// Such a run needs nothing of the reconciler: a caller that dies after
// sending the dispatch leaves a dispatch, and a worker that finds no row
// creates it claimed; so the run is spared the active-run index's two
// writes. A read before the publish keeps a second Dispatch of an existing
// run from publishing again (its miss is not confirmed on the leader: the
// create's compare-and-set catches a row a replica missed).
func (c *Client) dispatchPlain(ctx context.Context, req Request, d events.Dispatch) (*model.Row, bool, error) {
	existing, _, err := c.lookup(ctx, d.RunID)
	if err == nil {
		row, err := c.existing(ctx, existing, req)
		return row, false, err
	}
	if !errors.Is(err, runstore.ErrRunNotFound) {
		return nil, false, fmt.Errorf("parent: dispatch run %s: %w", d.RunID, err)
	}
	return c.settlePlain(ctx, req, d, c.sendPlain(req, d))
}

// sentPlain is a plain run's dispatch and row create on their way
// (sendPlain): ack and create wait for their answers.
type sentPlain struct {
	row    *model.Row
	ack    func(context.Context) (uint64, error)
	create func(context.Context) (uint64, error)
}

// sendPlain sends the dispatch d of a run with no row, and its row's
// create right behind it on the connection, without waiting.
func (c *Client) sendPlain(req Request, d events.Dispatch) sentPlain {
	ack := c.rt.PublishDispatchAsync(req.AgentType, d, true, c.cfg.DispatchRetry)
	row := model.NewUnindexedRun(req.AgentType, d, 0, time.Now())
	return sentPlain{row: row, ack: ack, create: c.store.CreateLater(row)}
}

// settlePlain awaits what sendPlain sent and answers as dispatchPlain: a
// create that failed is retried as Dispatch retries it, a publish whose
// answer is not a fresh acknowledgement is published again under the same
// message id, and a row that exists is the same run re-attached.
func (c *Client) settlePlain(ctx context.Context, req Request, d events.Dispatch, sent sentPlain) (*model.Row, bool, error) {
	row := sent.row
	_, cerr := sent.create(ctx)
	if cerr != nil && !errors.Is(cerr, runstore.ErrRunExists) && ctx.Err() == nil {
		cerr = jsfault.RetryRepair(ctx, c.cfg.DispatchRetry, c.rt.Repair, func(ctx context.Context) error {
			_, err := c.store.Create(ctx, row)
			return err
		})
	}
	seq, perr := sent.ack(ctx)
	fresh := perr == nil
	if perr != nil {
		// Retried under the same message id: a copy that landed is kept.
		var p engine.Published
		p, perr = c.rt.PublishDispatch(ctx, req.AgentType, d,
			engine.DispatchOptions{RowAfter: true, Retry: c.cfg.DispatchRetry, Requeue: true})
		seq, fresh = p.Seq, !p.Duplicate
	}
	switch {
	case errors.Is(cerr, runstore.ErrRunExists):
		// A worker was quicker (it created the row claimed), or a
		// concurrent Dispatch of the same id: the same run either way.
		existing, _, err := c.get(ctx, d.RunID)
		if err != nil {
			return nil, false, fmt.Errorf("parent: dispatch run %s: %w", d.RunID, err)
		}
		if perr != nil || !fresh || (existing.DispatchSeq != 0 && existing.DispatchSeq != seq) {
			row, err := c.existing(ctx, existing, req)
			return row, false, err
		}
		return existing, true, nil // the run of our dispatch
	case perr != nil:
		if cerr == nil {
			c.failDispatch(ctx, row.ID, perr)
		}
		return nil, false, fmt.Errorf("parent: dispatch run %s: %w: %w", d.RunID, ErrDispatchFailed, perr)
	case cerr != nil:
		// The dispatch is stored: a worker creates the row when it takes
		// it, and a Dispatch of the same id again re-attaches.
		return nil, false, fmt.Errorf("parent: dispatch run %s: the dispatch is queued but its row could not be written: %w", d.RunID, cerr)
	}
	return row, fresh, nil // not fresh: a concurrent Dispatch of the id published first
}

// failDispatch ends a run whose dispatch could not be published.
func (c *Client) failDispatch(ctx context.Context, id string, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ended := model.Ended{Status: events.StatusError, Reason: events.ReasonDispatchFailed, Error: "dispatch failed: " + cause.Error()}
	now := time.Now()
	row, _, err := c.store.Mutate(ctx, id, func(r *model.Row) error {
		if r.Status != events.StatusStarting {
			return runstore.ErrNoChange
		}
		return model.Apply(r, ended, now)
	})
	if err != nil {
		c.log.ErrorContext(ctx, "mark undispatched run failed; the reconciler dispatches it again", "run_id", id, "err", err)
		return
	}
	if row.Status == events.StatusError && row.Reason == events.ReasonDispatchFailed {
		c.announce(ctx, row)
	}
}

// existing answers a dispatch for a run id that has a row: the same run,
// never a second execution. A row still "starting" whose dispatch message is
// gone gets it published again.
func (c *Client) existing(ctx context.Context, row *model.Row, req Request) (*model.Row, error) {
	if row.AgentType != req.AgentType {
		return nil, fmt.Errorf("parent: dispatch run %s as %s: %w (%s)", row.ID, req.AgentType, ErrRunIDConflict, row.AgentType)
	}
	if row.Status == events.StatusInterrupted && !row.ChildStillRunning {
		if row.ConcurrencyKey != "" {
			return c.requeue(ctx, row)
		}
		return c.resume(ctx, row)
	}
	if row.Status != events.StatusStarting {
		return row, nil // final: as stored; live or interrupted with its child running: re-attach
	}
	if row.DispatchSeq > 0 {
		queued, err := c.rt.DispatchQueued(ctx, row.DispatchSeq)
		if err != nil {
			return nil, fmt.Errorf("parent: dispatch run %s: %w", row.ID, err)
		}
		if queued {
			return row, nil
		}
	}
	seq, err := c.publishDispatch(ctx, row.AgentType, row.Dispatch(), row.DispatchMsgID())
	if err != nil {
		return nil, fmt.Errorf("parent: dispatch run %s: %w: %w", row.ID, ErrDispatchFailed, err)
	}
	next, _, err := c.store.Mutate(ctx, row.ID, model.Mutation(time.Now(), model.DispatchRecorded{Seq: seq, Replace: true}))
	if err != nil {
		return nil, fmt.Errorf("parent: dispatch run %s: %w", row.ID, err)
	}
	return next, nil
}

// resume starts an interrupted run whose child stopped again, as a new
// attempt that keeps its milestones (retryable means just that). Exactly
// one of concurrent callers moves the row back to "starting" and publishes
// the dispatch; the others find it starting (or further) and re-attach.
func (c *Client) resume(ctx context.Context, row *model.Row) (*model.Row, error) {
	next, resumed, err := c.rt.Resume(ctx, row, false)
	if err != nil {
		return nil, fmt.Errorf("parent: %w", err)
	}
	if !resumed {
		return next, nil
	}
	seq, err := c.publishDispatch(ctx, next.AgentType, next.Dispatch(), next.DispatchMsgID())
	if err != nil {
		// The row is "starting" without a dispatch: the reconciler
		// publishes it, as for a parent that died between the two.
		return nil, fmt.Errorf("parent: resume run %s: %w: %w", row.ID, ErrDispatchFailed, err)
	}
	next, _, err = c.store.Mutate(ctx, row.ID, model.Mutation(time.Now(), model.DispatchRecorded{Seq: seq, Replace: true}))
	if err != nil {
		return nil, fmt.Errorf("parent: resume run %s: %w", row.ID, err)
	}
	return next, nil
}

// publishDispatch publishes d under msgID, retrying for DispatchRetry,
// so that it is queued (engine.DispatchOptions.Requeue), and returns its
// stream sequence.
func (c *Client) publishDispatch(ctx context.Context, agentType string, d events.Dispatch, msgID string) (uint64, error) {
	p, err := c.rt.PublishDispatch(ctx, agentType, d,
		engine.DispatchOptions{MsgID: msgID, Retry: c.cfg.DispatchRetry, Requeue: true})
	return p.Seq, err
}

// checkAgentType reports ErrUnknownAgentType unless some worker created the
// agent type's consumer, or a live worker announces the type (its consumer
// deleted and being restored). Positive answers are cached for a minute.
func (c *Client) checkAgentType(ctx context.Context, agentType string) error {
	if c.cfg.AllowUnknownAgentTypes {
		return nil
	}
	c.mu.Lock()
	until, ok := c.agents[agentType]
	c.mu.Unlock()
	if ok && time.Now().Before(until) {
		return nil
	}
	err := jsfault.Retry(ctx, c.cfg.DispatchRetry, func(ctx context.Context) error {
		_, err := c.js.Consumer(ctx, c.ns.DispatchStream(), wire.AgentConsumer(agentType))
		return err
	})
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		// Gone while a live worker announces the type (deleted, and being
		// restored): the dispatch waits in the stream for it.
		err = c.announced(ctx, agentType)
	} else if err != nil {
		err = fmt.Errorf("parent: look up agent type %s: %w", agentType, err)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.agents[agentType] = time.Now().Add(DefaultAgentTypeCache)
	c.mu.Unlock()
	return nil
}

// announced returns nil when a live worker announces agentType in the
// registry, else ErrUnknownAgentType.
func (c *Client) announced(ctx context.Context, agentType string) error {
	reg, ok, err := registry.Bind(ctx, c.js, c.ns)
	if err == nil && ok {
		_, ok, err = reg.Agent(ctx, agentType)
	}
	switch {
	case err != nil:
		return fmt.Errorf("parent: look up agent type %s: %w", agentType, err)
	case !ok:
		return fmt.Errorf("parent: %w %q: no worker serves it", ErrUnknownAgentType, agentType)
	}
	return nil
}

// get reads the row of run id, retrying transient faults for at most
// DispatchRetry.
func (c *Client) get(ctx context.Context, id string) (*model.Row, uint64, error) {
	return c.read(ctx, id, c.store.Get)
}

// lookup is get for the check before a create: a miss is not confirmed on
// the leader (runstore.Store.Lookup), since the create's compare-and-set catches
// a row a replica missed.
func (c *Client) lookup(ctx context.Context, id string) (*model.Row, uint64, error) {
	return c.read(ctx, id, c.store.Lookup)
}

func (c *Client) read(ctx context.Context, id string, get func(context.Context, string) (*model.Row, uint64, error)) (row *model.Row, rev uint64, err error) {
	err = jsfault.RetryRepair(ctx, c.cfg.DispatchRetry, c.rt.Repair, func(ctx context.Context) error {
		row, rev, err = get(ctx, id)
		return err
	})
	return row, rev, err
}

// fault logs a failed JetStream call at warn level, at most once per
// obs.DefaultLogEvery for each message and class of fault (jsfault), with
// the count of what was left out.
func (c *Client) fault(ctx context.Context, msg string, err error, args ...any) {
	class := jsfault.Classify(ctx, err).String()
	c.logs.Log(ctx, c.log, slog.LevelWarn, msg+"/"+class, msg, append(args, "fault", class, "err", err)...)
}

// Inspect returns the run's row, as [kv.Runs.Get] reads it, or an error
// wrapping [ErrRunNotFound] when there is no record of it (yet: a run
// exists once Dispatch created it).
func (c *Client) Inspect(ctx context.Context, id string) (*jetruntype.Run, error) {
	row, err := c.runs.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("parent: inspect: %w", err)
	}
	return row, nil
}

// stored returns the run's stored row, read as Inspect reads it: for the
// client's own decisions (a replay's start, a run's calls), which the read
// type does not carry.
func (c *Client) stored(ctx context.Context, id string) (*model.Row, error) {
	var row *model.Row
	err := jsfault.Retry(ctx, kv.DefaultRetry, func(ctx context.Context) (err error) {
		row, _, err = c.store.Get(ctx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("parent: inspect: %w", err)
	}
	return row, nil
}

// List returns the rows with one of statuses (every row when none is
// given), newest first: [kv.Runs.List] with [kv.ListOptions.Statuses].
func (c *Client) List(ctx context.Context, statuses ...events.Status) ([]*jetruntype.Run, error) {
	rows, err := c.runs.List(ctx, kv.ListOptions{Statuses: statuses})
	if err != nil {
		return nil, fmt.Errorf("parent: %w", err)
	}
	return rows, nil
}

// announce publishes the status event of a transition this client made (a
// finisher publishes an owed finish from it) and returns the row it
// announced. A run ended or given up with no worker holding it first
// counts the steps its lost attempt stored (engine.Runtime.CountLostSteps).
// A failure is logged: the reconciler republishes owed finishes.
func (c *Client) announce(ctx context.Context, r *model.Row) *model.Row {
	r, err := c.rt.CountLostSteps(ctx, r)
	if err != nil {
		c.fault(ctx, "count the stored steps of a run ended without its worker", err, "run_id", r.ID)
	}
	if err := c.rt.Announce(ctx, r, ""); err != nil {
		c.fault(ctx, "announce transition", err, "run_id", r.ID, "status", r.Status)
	}
	return r
}
