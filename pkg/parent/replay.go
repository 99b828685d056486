package parent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
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

// ReplayOptions says where a [Client.Replay] starts, which events it
// yields and how long it follows the run. The zero value replays the whole
// history, then follows the run until it ends.
type ReplayOptions struct {
	// After is the last [events.Event.Seq] the caller already has: the
	// replay yields the events stored after it (0: the whole history). A
	// caller that stopped amid the chunks of one coalesced chunk event (see
	// [events.Event.Part]) resumes after Seq-1 and skips those it has.
	After uint64
	// Follow is how long the replay goes on after the stored history
	// (default [events.UntilEnd]).
	Follow events.Follow
	// Kinds restricts the replay to these kinds ([events.KindChunk], …;
	// default: every kind).
	Kinds []string
}

// Replay yields the stored events of a run that exists, in order, then
// follows it live as [ReplayOptions.Follow] says. History and live events
// come from one server cursor, so the hand-over neither loses nor repeats
// an event. A transient fault (the server restarting, a leader election)
// does not end the replay: it resumes after the last event it yielded,
// with backoff, for as long as ctx lives. Any other fault is yielded as the
// last error, and when ctx ends the last error wraps
// [events.ErrReplayStopped]. Replay returns [ErrRunNotFound] for an
// unknown run: a guessed id never creates anything.
func (c *Client) Replay(ctx context.Context, id string, opts ReplayOptions) (iter.Seq2[events.Event, error], error) {
	row, err := c.stored(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("parent: replay: %w", err)
	}
	return c.replay(ctx, row, opts), nil
}

// replay is Replay of row's run: wire.Replay, started again after the last
// event yielded when it fails on a transient fault.
func (c *Client) replay(ctx context.Context, row *model.Row, opts ReplayOptions) iter.Seq2[events.Event, error] {
	return func(yield func(events.Event, error) bool) {
		at := replayPosition{seq: opts.After, part: -1}
		bo := jsfault.NewBackOff(0) // reset by an event
		for {
			var failed error
			for ev, err := range wire.Replay(ctx, c.js, c.ns, row.ID, replayOptions(row, at.after(), opts.Follow, opts.Kinds)) {
				if err != nil {
					failed = err
					break
				}
				if at.yielded(ev) {
					continue // the chunks of a coalesced event yielded before a fault
				}
				if !yield(ev, nil) {
					return
				}
				at = positionAfter(ev)
				bo.Reset()
			}
			if failed == nil {
				return
			}
			if ctx.Err() != nil || !jsfault.IsTransient(ctx, failed) {
				yield(events.Event{}, failed)
				return
			}
			c.fault(ctx, "replay run events; resuming", failed, "run_id", row.ID)
			if err := jsfault.Sleep(ctx, bo.NextBackOff()); err != nil {
				yield(events.Event{}, fmt.Errorf("parent: replay %s: %w: %w", row.ID, events.ErrReplayStopped, err))
				return
			}
		}
	}
}

// replayPosition is where a replay stands: after stream sequence seq, or,
// mid (part >= 0), after chunk part of the coalesced chunk event seq.
type replayPosition struct {
	seq  uint64
	part int // -1: the whole event at seq
}

// positionAfter is the position just after ev.
func positionAfter(ev events.Event) replayPosition {
	if ev.LastPart() {
		return replayPosition{seq: ev.Seq, part: -1}
	}
	return replayPosition{seq: ev.Seq, part: ev.Part}
}

// after is the stream sequence to replay after: the one before a
// coalesced event left midway.
func (p replayPosition) after() uint64 {
	if p.part >= 0 {
		return p.seq - 1
	}
	return p.seq
}

// yielded reports whether ev lies at or before p (a replay resumed midway
// through a coalesced chunk event yields its first chunks again).
func (p replayPosition) yielded(ev events.Event) bool {
	return p.part >= 0 && ev.Seq == p.seq && ev.Part <= p.part
}

func replayOptions(row *model.Row, after uint64, follow events.Follow, kinds []string) events.ReplayOptions {
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
	seq, err := c.Replay(ctx, id, ReplayOptions{Kinds: []string{events.KindMilestone, events.KindStatus}})
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
