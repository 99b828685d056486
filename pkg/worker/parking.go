package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrun/jetrun/internal/engine/pull"
)

// parking is the concurrency slot of the run's dispatch, given back while
// the handler is parked (Run.Park, Run.Wait) and taken back after. Parks
// nest. Its lock is never held while a slot is waited for: one unpark
// takes the slot back outside it (taking) and the others wait for that;
// Release, which only counts, is called under it.
type parking struct {
	mu     sync.Mutex
	slot   *pull.Slot // nil once the attempt left it (leave)
	parked int
	since  time.Time     // when the outermost park began (zero: not parked)
	isIn   atomic.Bool   // parked > 0, read without the lock by the heart (quiet)
	over   bool          // the attempt ended: a slot given back stays with the loop
	taking chan struct{} // an unpark waiting for the slot; closed when it is done
	woke   func()        // called, without the lock, when the last park ends (rest.go)
}

func newParking(slot *pull.Slot) *parking { return &parking{slot: slot} }

// park gives the slot back (at the first of nested parks).
func (p *parking) park() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked++; p.parked == 1 {
		p.since = time.Now()
		p.isIn.Store(true)
		if p.slot != nil && p.taking == nil {
			p.slot.Release() // while an unpark takes it, that unpark gives it back
		}
	}
}

// parkedSince is when the handler parked, zero when it is not parked.
func (p *parking) parkedSince() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.since
}

// unpark ends one park; the last one takes a slot back, waiting for a
// free one, unless the attempt is over or left its slot.
func (p *parking) unpark(ctx context.Context) error {
	p.mu.Lock()
	woke := func() {}
	if p.parked--; p.parked == 0 {
		p.since = time.Time{}
		p.isIn.Store(false)
		if p.woke != nil {
			woke = p.woke
		}
	}
	// The heart hears of the end of the park at the first unlock (rest.go),
	// never in between: a park then must see the state this one left.
	unlock := func() {
		p.mu.Unlock()
		woke()
		woke = func() {}
	}
	for {
		if p.parked > 0 || p.slot == nil || p.over {
			unlock()
			return nil // still parked, or the attempt is over: its slot went with it
		}
		if p.taking == nil {
			break
		}
		taking := p.taking
		unlock()
		select {
		case <-taking:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	slot, taking := p.slot, make(chan struct{})
	p.taking = taking
	unlock()
	err := slot.Acquire(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.taking = nil
	close(taking)
	if err == nil && (p.parked > 0 || p.slot == nil) {
		slot.Release() // parked again, or left, while it waited
	}
	return err
}

// end says the attempt is over: an unpark after it takes no slot back.
func (p *parking) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.over = true
}

// leave gives the slot back for good (a no-op if a park gave it back
// already); an unpark after it takes none.
func (p *parking) leave() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slot != nil && p.taking == nil {
		p.slot.Release()
	}
	p.slot = nil // an unpark taking it gives it back
}
