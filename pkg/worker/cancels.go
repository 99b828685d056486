package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// A worker process follows what concerns the runs it holds with two
// ordered consumers, whatever the number of runs: every run's cancel events
// and every run's signals, from the moment it starts. An ordered consumer
// resumes where it stopped after a disconnect, so nothing published while
// the worker was reconnecting is missed.

// followCancels starts the consumer of cancel events
// (jetrun.run.<id>.cancel): a cancel for the attempt of a run this process
// holds, or is claiming, cancels its handler. A cancel recorded before the
// claim is on the row the claim read.
//
// An event is acted on only for the attempt the row's cancel was
// recorded for: the event names it (events.CancelEvent.Attempt), or,
// when it does not (a writer in another language), the row is read. A
// late copy of an earlier attempt's cancel (the reconciler re-notifies a
// cancel until the attempt stops) never stops a retried run's new attempt.
func (w *Worker) followCancels(ctx context.Context) (jetstream.ConsumeContext, error) {
	var ccs wire.ConsumeContexts
	for _, stream := range w.rt.EventsStreamNames() { // one per events stream
		cc, err := w.follow(ctx, "cancels", stream, w.ns.CancelWildcard(), func(tokens []string, data []byte) {
			w.onCancel(ctx, tokens[len(tokens)-2], data) // jetrun.run.<id>.cancel
		})
		if err != nil {
			ccs.Stop()
			return nil, err
		}
		ccs = append(ccs, cc)
	}
	return ccs, nil
}

// onCancel acts on the cancel event data of run id (see followCancels).
func (w *Worker) onCancel(ctx context.Context, id string, data []byte) {
	w.mu.Lock()
	e := w.active[id]
	w.mu.Unlock()
	if e == nil {
		return
	}
	var ev events.CancelEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		ev.Attempt = 0 // unreadable: the row says
	}
	if ev.Attempt == 0 {
		ev.Attempt = w.cancelledAttempt(ctx, id)
	}
	if ev.Attempt != 0 {
		e.ctl.requestCancel(ev.Attempt)
	}
}

// cancelCheckTimeout bounds the row read that checks a cancel event
// naming no attempt.
const cancelCheckTimeout = 2 * time.Second

// cancelledAttempt reads run id's row (from its leader: the cancel's
// write is there) and returns the attempt of this worker whose cancel it
// records, or 0. A read that fails is 0: the reconciler tells the worker
// again (with the attempt) while the cancel is pending.
func (w *Worker) cancelledAttempt(ctx context.Context, id string) int {
	ctx, cancel := context.WithTimeout(ctx, cancelCheckTimeout)
	defer cancel()
	row, _, err := w.store.Latest(ctx, id)
	if err != nil {
		w.log.DebugContext(ctx, "check a cancel event against the row", "run_id", id, "err", err)
		return 0
	}
	return row.CancelledAttempt(w.cfg.ID)
}

// followSignals starts the consumer of signals (jetrun.signal.<id>.<name>):
// a signal wakes the Waits of its run and name in this process, which read
// it from the stream (see Run.Wait).
func (w *Worker) followSignals(ctx context.Context) (jetstream.ConsumeContext, error) {
	return w.follow(ctx, "signals", w.ns.SignalsStream(), w.ns.SignalsWildcard(), func(tokens []string, _ []byte) {
		// jetrun.signal.<id>.<name>
		w.waiters.wake(tokens[len(tokens)-2], tokens[len(tokens)-1])
	})
}

// follow consumes filter on stream from now on, handing each message's
// subject tokens and data to on.
func (w *Worker) follow(ctx context.Context, what, stream, filter string, on func(tokens []string, data []byte)) (jetstream.ConsumeContext, error) {
	c, err := w.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		InactiveThreshold: wire.FollowInactive,
	})
	if err != nil {
		return nil, fmt.Errorf("worker: follow %s: %w", what, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		if tokens := strings.Split(m.Subject(), "."); len(tokens) >= 4 {
			on(tokens, m.Data())
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		w.log.Debug("follow "+what, "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("worker: follow %s: %w", what, err)
	}
	return cc, nil
}

// waiters are the Waits in progress in this process, by run and signal
// name.
type waiters struct {
	mu sync.Mutex
	m  map[string][]chan struct{}
}

// add registers a Wait for run id's signal name; the channel is signalled
// whenever such a signal is stored.
func (ws *waiters) add(id, name string) chan struct{} {
	ch := make(chan struct{}, 1)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = make(map[string][]chan struct{})
	}
	ws.m[id+"."+name] = append(ws.m[id+"."+name], ch)
	return ch
}

func (ws *waiters) remove(id, name string, ch chan struct{}) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	key := id + "." + name
	ws.m[key] = slices.DeleteFunc(ws.m[key], func(c chan struct{}) bool { return c == ch })
	if len(ws.m[key]) == 0 {
		delete(ws.m, key)
	}
}

func (ws *waiters) wake(id, name string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, ch := range ws.m[id+"."+name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// nextSignal returns the first signal named name stored after sequence
// seen, waiting for one. It reads the stream directly (the next message on
// the signal's subject); the worker's one signal consumer wakes it when a
// new signal is stored, so a waiting run costs no server consumer.
func (e *execution) nextSignal(ctx context.Context, name string, seen uint64, created time.Time) (json.RawMessage, uint64, error) {
	wake := e.w.waiters.add(e.id, name)
	defer e.w.waiters.remove(e.id, name, wake)
	for {
		payload, seq, err := e.storedSignal(ctx, name, seen, created)
		if err != nil || seq != 0 {
			return payload, seq, err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, 0, context.Cause(ctx)
		}
	}
}

// storedSignal reads the first signal named name stored after sequence
// seen; seq 0 when there is none yet. Without a seen sequence, signals
// stored well before the run was created (an earlier run of the same id)
// are skipped.
func (e *execution) storedSignal(ctx context.Context, name string, seen uint64, created time.Time) (json.RawMessage, uint64, error) {
	subject := e.w.ns.SignalSubject(e.id, name)
	from := created.Add(-time.Minute) // tolerate clock skew with the server
	for next := seen + 1; ; {
		msg, err := e.w.signalsStream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, 0, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, context.Cause(ctx)
			}
			return nil, 0, fmt.Errorf("worker: wait for signal %s: %w", name, err)
		}
		if seen == 0 && msg.Time.Before(from) {
			next = msg.Sequence + 1
			continue
		}
		payload := json.RawMessage(msg.Data)
		if len(payload) == 0 || !json.Valid(payload) {
			// A plain publish may carry text: hand it over as a JSON string.
			payload, _ = json.Marshal(string(msg.Data))
		}
		return payload, msg.Sequence, nil
	}
}
