package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// publishWindow bounds the events of one attempt in flight (published, not
// yet acknowledged) on a single-replica events stream. A publish beyond it
// waits for the oldest.
const publishWindow = 256

// eventWindow is the publish window for an events stream of the given
// replicas. A clustered stream's leader lets only one message checked
// against a subject's last sequence be in process at a time and refuses the
// others at once (wire.IsSubjectInProcess), and every event of an
// attempt is checked against the run's status subject: on a replicated
// stream an attempt's events go one at a time. Runs still stream side by
// side, each with its own status subject.
func eventWindow(replicas int) int {
	if replicas > 1 {
		return 1
	}
	return publishWindow
}

// publisher writes one attempt's events to the run's subjects, pipelined:
// up to window events are in flight at once, in order, so a chatty run
// streams at close to JetStream's asynchronous rate (on a single-replica
// stream; see eventWindow).
//
// Fencing. Every event carries Nats-Expected-Last-Subject-Sequence for the
// run's status subject (jetrun.run.<id>.status) at the sequence of the
// newest status event the attempt knows, its own "running" from the start.
// That value does not change while the attempt streams, so every event in
// flight carries it; and once anyone else appends a status event (a new
// attempt's "running", a give-up) every later event of this attempt is
// refused by the server. The publisher then reads the newest status event
// and the row: if the row still names this attempt (a give-up that leaves
// the child running), it carries on from the new status event, re-sending
// what was refused; otherwise the attempt is fenced: it publishes nothing
// more and its handler is cancelled (ErrLeaseLost).
//
// Faults. A transient failure (no response, a leader election, a
// disconnect) is retried with backoff, re-sending the events from the first
// unacknowledged one under their Nats-Msg-Ids (a copy that had landed is
// deduplicated), for as long as the worker still holds its runs (until).
// After a transient fault an event may be stored after its successor; chunk
// and milestone sequence numbers say the order.
type publisher struct {
	js      jetstream.JetStream
	stream  jetstream.Stream // the run's events stream, for last-message lookups
	streams int              // how many events streams there are (wire.Namespace.EventSubject)
	store   *runstore.Store
	ns      wire.Namespace
	runID   string
	worker  string
	attempt int
	window  *atomic.Int64       // events in flight at most, the worker's (eventWindow); narrowed to 1 by a refusal as "in process"
	lost    func()              // cancels the handler once the attempt is fenced
	lapsed  func()              // cancels it when the worker's liveness ran out during a fault
	until   func() time.Time    // transient faults are retried until then
	trace   events.TraceContext // set as headers on every event
	chunks  chunkBatch          // the open batch of coalesced chunks (coalesce.go), guarded by mu

	mu       sync.Mutex
	fenceSeq uint64           // sequence of the newest status event of the run known
	opening  *outgoing        // the attempt's "running" event while open's send of it is unsettled
	opened   func(seq uint64) // told (under mu) the sequence of the event open sent, once stored
	inflight []*outgoing
	sent     int                         // the events at the head of inflight that are on their way; the rest wait for room in the window
	fenced   atomic.Bool                 // set under mu; read without it (isFenced), so the heart never waits on a busy publisher
	ranOut   bool                        // fenced because the worker's liveness ran out during a fault
	err      error                       // a permanent failure: every later publish returns it
	bo       *backoff.ExponentialBackOff // pauses between retries of a fault; reset by an acknowledgement

	woke func() // called, without mu, after an event is put in flight (rest.go); nil: none
}

// outgoing is one event, kept until the server acknowledged it.
type outgoing struct {
	kind, msgID string
	data        []byte
	fut         jetstream.PubAckFuture
	seq         uint64         // set once acknowledged
	stored      func(dup bool) // if set, called (under mu) once acknowledged; dup: as a copy of an event stored before
}

// publish appends one event. With wait it returns once the event (and
// every event before it) is stored, with its stream sequence; without, it
// returns once the event is in flight (seq 0), and a failure shows on a
// later call.
func (p *publisher) publish(ctx context.Context, kind, msgID string, v any, wait bool) (uint64, error) {
	seq, _, err := p.publishOutgoing(ctx, kind, msgID, v, wait, nil)
	return seq, err
}

// publishTracked publishes like publish with wait, for an event whose
// storing matters past the call: stored, if not nil, is called (under the
// publisher's lock: it must not publish) when the server acknowledges the
// event, even after publishTracked returned an error (its context ended
// while it waited, say). queued reports whether the event was put on its
// way: an event that was not is never stored.
func (p *publisher) publishTracked(ctx context.Context, kind, msgID string, v any, stored func(dup bool)) (queued bool, err error) {
	_, queued, err = p.publishOutgoing(ctx, kind, msgID, v, true, stored)
	return queued, err
}

func (p *publisher) publishOutgoing(ctx context.Context, kind, msgID string, v any, wait bool, stored func(bool)) (uint64, bool, error) {
	data, err := encodeEvent(v)
	if err != nil {
		return 0, false, fmt.Errorf("worker: encode %s event of run %s: %w", kind, p.runID, err)
	}
	if p.woke != nil {
		defer p.woke() // after the unlock: the heart tidies what it leaves in flight
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failed(); err != nil {
		return 0, false, err
	}
	if err := p.closeChunksLocked(ctx); err != nil { // the chunks before it go first
		return 0, false, err
	}
	seq, err := p.enqueueLocked(ctx, &outgoing{kind: kind, msgID: msgID, data: data, stored: stored}, wait)
	return seq, true, err
}

// encodeEvent encodes an event's payload: a status event (every attempt
// publishes two) without reflection, as json.Marshal would.
func encodeEvent(v any) ([]byte, error) {
	if ev, ok := v.(events.StatusEvent); ok {
		return wire.EncodeStatusEvent(&ev)
	}
	return json.Marshal(v)
}

// open sends the attempt's "running" status event without waiting for its
// acknowledgement, so a first attempt's handler starts while it is on its
// way. Its sequence is the fence of every later event (see publisher), so
// the first of them, or a flush, waits for it first (settleOpeningLocked):
// no event is sent under a fence that is not known yet. It is the first
// event of the attempt.
func (p *publisher) open(ctx context.Context, msgID string, v any) error {
	data, err := encodeEvent(v)
	if err != nil {
		return fmt.Errorf("worker: encode %s event of run %s: %w", events.KindStatus, p.runID, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failed(); err != nil {
		return err
	}
	o := &outgoing{kind: events.KindStatus, msgID: msgID, data: data}
	p.inflight = append(p.inflight, o)
	p.opening = o
	return p.fill(ctx)
}

// settleOpeningLocked waits until the event open sent is stored, if it is
// still in flight, and fences every later event on it; p.mu must be held.
// While it is in flight it is the only event in flight.
func (p *publisher) settleOpeningLocked(ctx context.Context) error {
	o := p.opening
	if o == nil {
		return nil
	}
	if o.seq == 0 {
		if err := p.settle(ctx, 1); err != nil {
			return err
		}
	}
	p.opening = nil
	p.fenceSeq = o.seq // our own "running" is the status event we stream after
	if p.opened != nil {
		p.opened(o.seq)
	}
	return nil
}

// tidy drops the events whose acknowledgements arrived, without waiting,
// and takes the fence of the attempt's "running" if its acknowledgement is
// among them. A run that waits (on a model, a person) may publish nothing
// for hours: without this its "running" stayed in flight, holding its
// message, and the row's firstEventSeq stayed unknown until its next event.
// It never waits for the publisher either: the worker's heartbeat calls it
// for every run, and a publisher busy publishing (waiting for answers
// through a fault, say) holds its lock and tends its events itself.
func (p *publisher) tidy() {
	if !p.mu.TryLock() {
		return
	}
	defer p.mu.Unlock()
	if p.failed() != nil {
		return
	}
	p.dropAcknowledgedLocked()
	if p.opening != nil && p.opening.seq != 0 {
		_ = p.settleOpeningLocked(context.Background()) // stored already: it does not wait
	}
}

// idle reports whether nothing is in flight or open: no event awaits its
// acknowledgement, no chunk batch is open. A busy publisher is not idle.
func (p *publisher) idle() bool {
	if !p.mu.TryLock() {
		return false
	}
	defer p.mu.Unlock()
	return p.opening == nil && len(p.inflight) == 0 && p.chunks.open == nil
}

// openPending reports whether the event open sent is not known to be
// stored: its attempt must not end its run (every event of an attempt is
// stored before its run is final).
func (p *publisher) openPending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opening != nil
}

// enqueueLocked appends o to the events in flight (see publish); p.mu must
// be held.
func (p *publisher) enqueueLocked(ctx context.Context, o *outgoing, wait bool) (uint64, error) {
	if err := p.settleOpeningLocked(ctx); err != nil {
		return 0, err
	}
	p.dropAcknowledgedLocked()
	p.inflight = append(p.inflight, o)
	if err := p.fill(ctx); err != nil {
		return 0, err
	}
	switch window := p.windowSize(); {
	case wait:
		if err := p.settle(ctx, len(p.inflight)); err != nil {
			return 0, err
		}
		return o.seq, nil
	case len(p.inflight) >= window:
		return 0, p.settle(ctx, len(p.inflight)-window+1)
	}
	return 0, nil
}

func (p *publisher) windowSize() int { return int(max(p.window.Load(), 1)) }

// fill sends the events of the window that are not on their way yet: the
// newest one, or those a fault or a narrowed window held back.
func (p *publisher) fill(ctx context.Context) error {
	for ; p.sent < min(p.windowSize(), len(p.inflight)); p.sent++ {
		if err := p.send(ctx, p.inflight[p.sent]); err != nil {
			return err
		}
	}
	return nil
}

// dropAcknowledgedLocked drops the events at the head of the window whose
// acknowledgement arrived, without waiting, so a streaming run holds only
// what is still on its way (each event keeps its message until then). An
// event refused or lost is left for settle to handle. p.mu must be held.
func (p *publisher) dropAcknowledgedLocked() {
	for p.sent > 0 {
		o := p.inflight[0]
		select {
		case ack := <-o.fut.Ok():
			o.seq = ack.Sequence
			if p.bo != nil {
				p.bo.Reset()
			}
			p.pop(ack.Duplicate)
		default:
			return
		}
	}
}

// pop drops the oldest event, stored (dup: as a copy of an event stored
// before), and tells its stored hook.
func (p *publisher) pop(dup bool) {
	if o := p.inflight[0]; o.stored != nil {
		o.stored(dup)
	}
	p.inflight[0] = nil // the backing array outlives the slice's head
	p.inflight = p.inflight[1:]
	p.sent--
}

// flush waits until every event published so far is stored.
func (p *publisher) flush(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failed(); err != nil {
		return err
	}
	if err := p.settleOpeningLocked(ctx); err != nil {
		return err
	}
	if err := p.closeChunksLocked(ctx); err != nil {
		return err
	}
	return p.settle(ctx, len(p.inflight))
}

func (p *publisher) failed() error {
	switch {
	case p.err != nil:
		return p.err
	case p.fenced.Load():
		return ErrLeaseLost
	}
	return nil
}

// message builds o's message, fenced on the run's status subject.
func (p *publisher) message(o *outgoing) *nats.Msg {
	m := &nats.Msg{Subject: p.ns.EventSubject(p.runID, o.kind, p.streams), Data: o.data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, o.msgID)
	m.Header.Set(events.HeaderAttempt, strconv.Itoa(p.attempt))
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.fenceSeq, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, p.ns.RunSubject(p.runID, events.KindStatus))
	wire.SetTraceHeaders(p.trace, m.Header)
	return m
}

// send puts o in flight, waiting out a full client-side window.
func (p *publisher) send(ctx context.Context, o *outgoing) error {
	for {
		fut, err := p.js.PublishMsgAsync(p.message(o))
		if err == nil {
			o.fut = fut
			return nil
		}
		if !jsfault.IsTransient(ctx, err) {
			p.err = fmt.Errorf("worker: publish %s event of run %s: %w", o.kind, p.runID, err)
			return p.err
		}
		if err := p.pause(ctx, err); err != nil {
			return err
		}
	}
}

// settle waits for the acknowledgements of the n oldest events in flight,
// in order, recovering from refusals and faults on the way.
func (p *publisher) settle(ctx context.Context, n int) error {
	for done := 0; done < n && len(p.inflight) > 0; {
		if err := p.fill(ctx); err != nil {
			return err
		}
		o := p.inflight[0]
		select {
		case ack := <-o.fut.Ok():
			if p.bo != nil {
				p.bo.Reset()
			}
			o.seq = ack.Sequence
			p.pop(ack.Duplicate)
			done++
		case err := <-o.fut.Err():
			landed, rerr := p.recover(ctx, o, err)
			if rerr != nil {
				return rerr
			}
			if landed {
				p.pop(true)
				done++
			}
			if rerr := p.resend(ctx); rerr != nil {
				return rerr
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// recover handles the failure of o, the oldest event in flight, before
// the caller re-sends what is in flight: landed reports that o itself had
// been stored and its answer lost. It fences the attempt, or gives up on a
// permanent error.
func (p *publisher) recover(ctx context.Context, o *outgoing, cause error) (landed bool, err error) {
	switch {
	case wire.IsSubjectInProcess(cause):
		// A clustered stream lets one event checked against the status
		// subject be in process at a time: the worker took the events
		// stream for a single replica (it was scaled up since, say) and
		// sent a window. From now on its attempts send one event at a
		// time. Or someone else's status event is being stored: either
		// way, try again shortly; a real mismatch then refences.
		p.window.Store(1)
		return false, p.pause(ctx, cause)
	case wire.IsWrongLastSequence(cause):
		return p.refence(ctx, o)
	case jsfault.IsTransient(ctx, cause):
		return false, p.pause(ctx, cause)
	}
	p.err = fmt.Errorf("worker: publish %s event of run %s: %w", o.kind, p.runID, cause)
	return false, p.err
}

// resend puts the events in flight on their way again, under the current
// fence, as many at once as the window allows; an answer to an earlier
// copy is no longer awaited (a copy that landed makes its resend a
// duplicate the stream acknowledges with the copy's sequence).
func (p *publisher) resend(ctx context.Context) error {
	p.sent = 0
	return p.fill(ctx)
}

// refence handles a refusal of o because the run's status subject moved.
// It reads the newest status event first and the row second: a takeover
// between the two reads shows in the row, and one after them makes the
// re-sent events fail again.
func (p *publisher) refence(ctx context.Context, o *outgoing) (landed bool, err error) {
	for {
		raw, err := p.stream.GetLastMsgForSubject(ctx, p.ns.RunSubject(p.runID, events.KindStatus))
		var last uint64
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			if jsfault.IsTransient(ctx, err) {
				if perr := p.pause(ctx, err); perr != nil {
					return false, perr
				}
				continue
			}
			p.err = fmt.Errorf("worker: read the last status of run %s: %w", p.runID, err)
			return false, p.err
		default:
			last = raw.Sequence
			if o.kind == events.KindStatus && raw.Header.Get(jetstream.MsgIDHeader) == o.msgID &&
				raw.Header.Get(events.HeaderAttempt) == strconv.Itoa(p.attempt) {
				p.fenceSeq, o.seq = last, last // our status event landed; its answer was lost
				return true, nil
			}
		}
		row, _, err := p.store.Get(ctx, p.runID)
		switch {
		case errors.Is(err, runstore.ErrRunNotFound):
		case err != nil:
			if jsfault.IsTransient(ctx, err) {
				if perr := p.pause(ctx, err); perr != nil {
					return false, perr
				}
				continue
			}
			p.err = fmt.Errorf("worker: check the holder of run %s: %w", p.runID, err)
			return false, p.err
		case row.HeldBy(p.worker, p.attempt) && !row.Status.Final():
			p.fenceSeq = last // another party (a give-up) wrote a status event
			return false, nil
		}
		p.fenceLocked()
		return false, ErrLeaseLost
	}
}

// pause waits before a retry of a transient fault, or fences the attempt
// when the worker can no longer count on holding its runs.
func (p *publisher) pause(ctx context.Context, cause error) error {
	if time.Now().After(p.until()) {
		p.err = fmt.Errorf("worker: events of run %s: the worker's liveness ran out during a fault: %w: %w", p.runID, ErrLeaseLost, cause)
		p.fenced.Store(true)
		p.ranOut = true
		go p.lapsed()
		return p.err
	}
	if p.bo == nil {
		p.bo = jsfault.NewBackOff(maxFaultPause)
	}
	return jsfault.Sleep(ctx, min(p.bo.NextBackOff(), time.Until(p.until())+time.Millisecond))
}

// maxFaultPause is the longest wait between retries of a transient
// publish fault (they start at jsfault.InitialInterval).
const maxFaultPause = time.Second

// halt stops every later publish without waiting for one in progress:
// the heart calls it (a lapse, a sync that found the run lost) for every
// run, and a publisher waiting out a fault holds its lock. The attempt's
// own end still calls fence, which waits.
func (p *publisher) halt() {
	p.fenced.Store(true)
	if p.mu.TryLock() {
		p.dropChunksLocked()
		p.mu.Unlock()
	}
}

// fence stops every later publish, once a publish in progress is done.
func (p *publisher) fence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fenced.Store(true)
	p.dropChunksLocked()
}

func (p *publisher) fenceLocked() {
	if p.fenced.CompareAndSwap(false, true) {
		go p.lost()
	}
}

// isFenced reports whether the publisher stopped accepting events. It
// does not wait for a publish in progress (the heart's row sync asks).
func (p *publisher) isFenced() bool { return p.fenced.Load() }

// livenessRanOut reports whether the publisher fenced the attempt because
// the worker's liveness ran out during a fault.
func (p *publisher) livenessRanOut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ranOut
}
