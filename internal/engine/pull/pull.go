// Package pull is the fetch loop jetrun's durable consumers share. It
// fetches only as many messages as it has free handler slots, so a busy
// process never hoards messages another one could handle (their ack wait
// would tick while they queue), runs each message's handler in a goroutine
// of its own (one that ran an earlier message's, when one waits: see
// runners), tracked by the caller's WaitGroup, and settles the message as
// the handler's outcome says.
package pull

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/settle"
)

// fetchWait bounds one pull request; ending the loop's context interrupts
// it at once.
const fetchWait = 5 * time.Second

// MaxErrorPause is the longest pause between two fetches that failed: the
// pauses grow from jsfault.InitialInterval to it, and start over after a
// fetch that did not fail.
const MaxErrorPause = 5 * time.Second

// Loop describes one fetch loop.
type Loop struct {
	// Consumer is the durable consumer to fetch from.
	Consumer jetstream.Consumer
	// Concurrency is how many handlers may run at once.
	Concurrency int
	// Handle processes one message and says how to settle it; the loop
	// applies the outcome. slot is the handler slot the message holds; see
	// Slot.
	Handle func(ctx context.Context, msg jetstream.Msg, slot *Slot) settle.Outcome
	// HandlerContext is the context handlers run under (nil: Run's). A
	// service ends it after Run's, so fetching stops before the work in
	// flight is cancelled (see service.Pullers).
	HandlerContext context.Context
	// Stopped says how to settle a message the loop does not handle
	// (typically settle.Retry, so another process takes it at once): one
	// that arrived after the loop's context ended, or one whose slot a
	// parked handler took back while the fetch waited for it (see
	// Slot.Acquire).
	Stopped func(msg jetstream.Msg) settle.Outcome
	// Handlers counts the handlers' goroutines, running or waiting for the
	// next message (until Run's context ends); the caller waits on it.
	Handlers *sync.WaitGroup
	// Logger and Name label failed fetches and settles. They are logged at
	// most once per LogEvery (obs.DefaultLogEvery when 0) and class of
	// fault, with the count of the lines left out.
	Logger   *slog.Logger
	Name     string
	LogEvery time.Duration
	// Repair, when set, re-creates the consumer (and what it needs) with
	// its configured settings; it must be idempotent. While fetches fail
	// it is called at most every RepairEvery: a consumer or stream deleted
	// at run time answers a fetch with "no responders", as an outage does.
	Repair func(ctx context.Context) error
	// Keep, when set, checks the consumer every KeepEvery between fetches
	// and restores it when it vanished or its settings drifted.
	Keep *Keeper
}

// RepairEvery bounds how often a failing loop calls its Repair.
const RepairEvery = 5 * time.Second

// Run fetches and dispatches messages until ctx ends. Handlers it started
// keep running; wait for them on Handlers.
//
// Every failed fetch (the request, or the batch it returned) is followed by
// a pause that grows with backoff while the failures go on, so an outage of
// any length costs a bounded number of requests and log lines.
func (l Loop) Run(ctx context.Context) {
	s := newSlots(l.Concurrency)
	bo := jsfault.NewBackOff(MaxErrorPause)
	logs := &obs.Throttle{Every: l.LogEvery}
	var lastRepair, lastKeep time.Time
	if l.Keep != nil {
		l.Keep.batch.Store(int64(s.size))
	}
	hctx := l.HandlerContext
	if hctx == nil {
		hctx = ctx
	}
	settled := func(msg jetstream.Msg, o settle.Outcome) {
		if err := o.Apply(msg); err != nil {
			class := jsfault.Classify(hctx, err).String()
			logs.Log(hctx, l.Logger, slog.LevelWarn, "settle/"+o.String()+"/"+class, "settle message", "consumer", l.Name,
				"outcome", o.String(), "fault", class, "err", err)
		}
	}
	failed := func(err error) {
		class := jsfault.Classify(ctx, err)
		logs.Log(ctx, l.Logger, slog.LevelWarn, class.String(), "fetch", "consumer", l.Name, "fault", class.String(), "err", err)
		if l.Repair != nil && time.Since(lastRepair) >= RepairEvery {
			lastRepair = time.Now()
			if rerr := l.Repair(ctx); rerr != nil && ctx.Err() == nil {
				rclass := jsfault.Classify(ctx, rerr).String()
				logs.Log(ctx, l.Logger, slog.LevelWarn, "repair/"+rclass, "re-create consumer", "consumer", l.Name,
					"fault", rclass, "err", rerr)
			}
		}
		pause(ctx, bo.NextBackOff())
	}
	// A handler may give its slot back before it returns (a worker's
	// attempt leaves it once its handler is done, and writes its end
	// outside it), so up to twice the slots' goroutines run at once: keep
	// as many waiting, or each burst of a fetch starts fresh goroutines.
	run := newRunners(func(msg jetstream.Msg) {
		slot := &Slot{slots: s, held: true}
		defer slot.Release()
		settled(msg, l.Handle(hctx, msg, slot))
	}, l.Handlers, ctx.Done(), 2*s.size)
	for ctx.Err() == nil {
		if l.Keep != nil && time.Since(lastKeep) >= KeepEvery {
			lastKeep = time.Now()
			if err := l.Keep.Check(ctx); err != nil && ctx.Err() == nil {
				class := jsfault.Classify(ctx, err).String()
				logs.Log(ctx, l.Logger, slog.LevelWarn, "keep/"+class, "check consumer", "consumer", l.Name,
					"fault", class, "err", err)
			}
		}
		n := s.lend(ctx)
		if n == 0 {
			return
		}
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		batch, err := l.Consumer.Fetch(n, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			s.unlend()
			if ctx.Err() == nil {
				failed(err)
			}
			continue
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			if ctx.Err() != nil || !s.use() {
				settled(msg, l.Stopped(msg))
				continue
			}
			run.start(msg)
		}
		cancel()
		s.unlend()
		switch err := batch.Error(); {
		case ctx.Err() != nil:
		case got > 0 || err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			bo.Reset() // messages, or a request that waited its time out: the consumer is there
		default:
			failed(err)
		}
	}
}

// Slot is the handler slot one message holds. A handler that parks (waits
// on something outside its process for a long time: a person, another run)
// may Release it, so the loop fetches other work meanwhile, and Acquire it
// again before it goes on. A Slot is used by one goroutine at a time.
type Slot struct {
	slots *slots
	held  bool
}

// Release gives the slot back to the loop; it does nothing if not held.
func (s *Slot) Release() {
	if s.held {
		s.held = false
		s.slots.give()
	}
}

// Acquire takes a slot again; it does nothing if the slot is held. A
// handler taking its slot back goes before new messages: it takes a free
// slot, else one the outstanding fetch holds for a message that has not
// come yet (such a message, should it come, finds no slot and is settled
// with Loop.Stopped), else it waits for the first slot given back, ahead
// of the loop's next fetch.
func (s *Slot) Acquire(ctx context.Context) error {
	if s.held {
		return nil
	}
	if err := s.slots.take(ctx); err != nil {
		return err
	}
	s.held = true
	return nil
}

// slots counts a loop's handler slots: held by handlers, or lent to the
// outstanding fetch until its messages come. Handlers waiting to take a
// slot back queue first come, first served; a slot given back goes to the
// first of them, and the loop fetches only with slots nobody waits for. No
// cost grows with the parked handlers: only the ones waiting are queued.
type slots struct {
	size int

	mu    sync.Mutex
	used  int             // held by handlers or lent to the fetch
	lent  int             // of used: lent to the outstanding fetch
	queue []chan struct{} // handlers waiting for a slot, first first; closed when given one
	freed chan struct{}   // wakes the loop waiting for a free slot (buffered 1)
}

func newSlots(size int) *slots {
	return &slots{size: max(size, 1), freed: make(chan struct{}, 1)}
}

// lend waits until slots are free and no handler waits for one, and lends
// them all to a fetch. It returns how many, 0 when ctx is done.
func (s *slots) lend(ctx context.Context) int {
	for {
		s.mu.Lock()
		if n := s.size - s.used; n > 0 && len(s.queue) == 0 {
			s.used, s.lent = s.size, n
			s.mu.Unlock()
			return n
		}
		s.mu.Unlock()
		select {
		case <-s.freed:
		case <-ctx.Done():
			return 0
		}
	}
}

// use gives a message the fetch brought a slot: one lent to the fetch, or
// one given back since, if no handler waits for it. False when there is
// none: a parked handler took the fetch's slot back meanwhile.
func (s *slots) use() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lent > 0:
		s.lent--
	case s.used < s.size && len(s.queue) == 0:
		s.used++
	default:
		return false
	}
	return true
}

// unlend gives back the slots the fetch that ended did not use.
func (s *slots) unlend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; s.lent > 0; s.lent-- {
		s.giveLocked()
	}
}

// take takes a slot for a handler (see Slot.Acquire).
func (s *slots) take(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.used < s.size && len(s.queue) == 0:
		s.used++
		s.mu.Unlock()
		return nil
	case s.lent > 0:
		s.lent--
		s.mu.Unlock()
		return nil
	}
	given := make(chan struct{})
	s.queue = append(s.queue, given)
	s.mu.Unlock()
	select {
	case <-given:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.queue, given); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
	} else {
		s.giveLocked() // given one as ctx ended: pass it on
	}
	return context.Cause(ctx)
}

// give gives a handler's slot back.
func (s *slots) give() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.giveLocked()
}

// giveLocked hands one held slot to the first waiting handler, or frees it
// and wakes the loop. s.mu is held.
func (s *slots) giveLocked() {
	if len(s.queue) > 0 {
		close(s.queue[0])
		s.queue[0] = nil
		s.queue = s.queue[1:]
		return
	}
	s.used--
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Drain is the two-phase stop of fetch loops and their handlers: it calls
// stop and waits for the loops, then waits for the handlers until ctx ends.
// If they are still running then, it calls forced (with the handlers that
// are late still running; forced cancels them) and waits at most grace
// more. It reports whether every handler returned.
func Drain(ctx context.Context, stop func(), loops, handlers *sync.WaitGroup, forced func(), grace time.Duration) bool {
	stop()
	loops.Wait()
	done := make(chan struct{})
	go func() {
		handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	forced()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
