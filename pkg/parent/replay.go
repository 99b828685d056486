package parent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Errors returned by the functions of this file; test with errors.Is.
var (
	// ErrMilestoneNotReached is returned by AwaitMilestone when the run
	// ended without reaching the milestone.
	ErrMilestoneNotReached = errors.New("run ended before reaching the milestone")
	// ErrRunEnded is returned by Signal for a run that ended: nothing
	// would ever receive the signal.
	ErrRunEnded = errors.New("run has ended")
)

// Replay yields the stored events of a run that exists, in order, then
// follows it live as follow says; after is the last stream sequence the
// caller already has (0 for the whole history). It returns
// ErrRunNotFound for an unknown run: a guessed id never creates
// anything. See wire.Replay.
func (c *Client) Replay(ctx context.Context, id string, after uint64, follow events.Follow, kinds ...string) (iter.Seq2[events.Event, error], error) {
	row, _, err := c.store.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("parent: replay: %w", err)
	}
	return wire.Replay(ctx, c.js, c.ns, id, replayOptions(row, after, follow, kinds)), nil
}

func replayOptions(row *jetruntype.Run, after uint64, follow events.Follow, kinds []string) events.ReplayOptions {
	return events.ReplayOptions{
		After:     after,
		StartSeq:  row.FirstEventSeq,
		StartTime: row.CreatedAt.Add(-time.Minute), // tolerate clock skew with the server
		Kinds:     kinds,
		Follow:    follow,
	}
}

// AwaitMilestone returns the milestone named name of run id once it is
// reached (at once if it already was). It returns ErrMilestoneNotReached if
// the run ends first, and ctx's error if ctx ends first.
func (c *Client) AwaitMilestone(ctx context.Context, id, name string) (events.Milestone, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seq, err := c.Replay(ctx, id, 0, events.UntilEnd, events.KindMilestone, events.KindStatus)
	if err != nil {
		return events.Milestone{}, err
	}
	for ev, err := range seq {
		if err != nil {
			if ctx.Err() != nil {
				return events.Milestone{}, fmt.Errorf("parent: await milestone %s of run %s: %w", name, id, ctx.Err())
			}
			return events.Milestone{}, fmt.Errorf("parent: await milestone %s of run %s: %w", name, id, err)
		}
		if ev.Milestone != nil && ev.Milestone.Name == name {
			return *ev.Milestone, nil
		}
		if ev.Ends() {
			return events.Milestone{}, fmt.Errorf("parent: run %s ended %s: %w", id, ev.Status.Status, ErrMilestoneNotReached)
		}
	}
	return events.Milestone{}, fmt.Errorf("parent: await milestone %s of run %s: %w", name, id, ErrMilestoneNotReached)
}

// ProgressHook is called for the progress and milestone events of the runs
// a client watches; ev.Progress or ev.Milestone is set. Hooks are best
// effort (live events only, not replayed after a restart) and must return
// quickly.
type ProgressHook func(runID string, ev events.Event)

// OnProgress registers a hook for the progress and milestones of every run
// the client awaits (Run, RunAll, Await) or watches (Watch). Register hooks
// before awaiting.
func (c *Client) OnProgress(hook ProgressHook) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks = append(c.hooks, hook)
}

func (c *Client) progressHooks() []ProgressHook {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ProgressHook(nil), c.hooks...)
}

// Watch feeds the progress hooks with run id's live progress and milestones
// until the run ends or ctx does. Await does this by itself.
func (c *Client) Watch(ctx context.Context, id string) error {
	hooks := c.progressHooks()
	row, _, err := c.store.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("parent: watch: %w", err)
	}
	// Live only: start after the newest event stored now.
	after, err := c.LastEventSeq(ctx, id)
	if err != nil {
		return fmt.Errorf("parent: watch: %w", err)
	}
	opts := replayOptions(row, after, events.UntilEnd, []string{events.KindProgress, events.KindMilestone})
	for ev, err := range wire.Replay(ctx, c.js, c.ns, id, opts) {
		if err != nil {
			if errors.Is(err, events.ErrReplayStopped) {
				return nil
			}
			return err
		}
		for _, h := range hooks {
			h(id, ev)
		}
	}
	return nil
}

// Signal sends a signal named name with payload (any JSON-encodable value;
// json.RawMessage passes through) to run id, where a handler's
// run.Wait(ctx, name) receives it. The signal is stored: a handler that
// waits later, or a worker that takes the run over, still gets it. It
// returns the signal's sequence in the signals stream, or ErrRunNotFound
// for an unknown run.
func (c *Client) Signal(ctx context.Context, id, name string, payload any) (uint64, error) {
	if err := events.ValidateToken("signal name", name); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	var data []byte
	switch p := payload.(type) {
	case json.RawMessage:
		if !json.Valid(p) {
			return 0, fmt.Errorf("%w: signal payload is not valid JSON", ErrBadRequest)
		}
		data = p
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return 0, fmt.Errorf("%w: signal payload is not JSON-encodable: %w", ErrBadRequest, err)
		}
		data = b
	}
	if len(data) > events.MaxSignalBytes {
		return 0, fmt.Errorf("%w: signal payload is %d bytes; the limit is %d", ErrBadRequest, len(data), events.MaxSignalBytes)
	}
	row, _, err := c.store.Get(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("parent: signal: %w", err)
	}
	if row.Status.Final() {
		return 0, fmt.Errorf("parent: signal %s to run %s: %w (%s)", name, id, ErrRunEnded, row.Status)
	}
	ack, err := c.js.Publish(ctx, c.ns.SignalSubject(id, name), data)
	if err != nil {
		return 0, fmt.Errorf("parent: signal %s to run %s: %w", name, id, err)
	}
	return ack.Sequence, nil
}

// LastEventSeq returns the stream sequence of run id's newest stored event,
// 0 if it has none yet.
func (c *Client) LastEventSeq(ctx context.Context, id string) (uint64, error) {
	m, err := c.rt.EventsStreamFor(id).GetLastMsgForSubject(ctx, c.ns.RunWildcard(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("parent: last event of run %s: %w", id, err)
	}
	return m.Sequence, nil
}
