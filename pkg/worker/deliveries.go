package worker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/settle"
)

// deliveries are the deliveries of a run's dispatch an attempt holds: the
// one it was claimed with and the redeliveries it adopted while it runs.
// They are heartbeat (InProgress, not an outcome) while the attempt lives,
// and settled together once it ends (release). Its lock guards the list
// and is never held while a delivery is sent anything: a release waits
// for the heartbeats already on their way, so no InProgress follows a
// delivery's outcome.
//
// A waiting run's deliveries are shelved instead (shelf.go): returned to
// the server once with a long delay, so they stay pending and cost no
// message while the run waits. nats.go lets a message settle only once, so
// a shelved delivery is settled with plain publishes on its
// acknowledgement subject (settle.Outcome.ApplyReply).
type deliveries struct {
	mu        sync.Mutex
	msgs      []jetstream.Msg
	released  bool
	lastBeat  time.Time        // the last InProgress
	beating   sync.WaitGroup   // heartbeats on their way
	shelf     *nats.Conn       // set once shelved: what the deliveries are settled on
	shelvedAt time.Time        // the last delayed refusal of a shelved run
	isShelf   atomic.Bool      // shelf != nil, read without the lock by the heart (quiet)
	entry     runstore.Shelved // the shelf entry written for them
}

func newDeliveries(msg jetstream.Msg) *deliveries {
	return &deliveries{msgs: []jetstream.Msg{msg}}
}

// first is the delivery the attempt was claimed with.
func (d *deliveries) first() jetstream.Msg {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.msgs[0]
}

// adopt records another delivery of the run's dispatch; false once the
// deliveries were released. A delivery of a shelved run is shelved too.
func (d *deliveries) adopt(msg jetstream.Msg) bool {
	d.mu.Lock()
	if d.released {
		d.mu.Unlock()
		return false
	}
	d.msgs = append(d.msgs, msg)
	shelved := d.shelf != nil
	if shelved {
		d.beating.Add(1) // a release waits for the refusal: its outcome comes after
	}
	d.mu.Unlock()
	if shelved {
		defer d.beating.Done()
		_ = msg.NakWithDelay(shelfDelay)
	}
	return true
}

// reply is the acknowledgement subject of the newest delivery: while the
// dispatch is pending, a refusal on it has the server redeliver it.
func (d *deliveries) reply() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.msgs[len(d.msgs)-1].Reply()
}

// isShelved reports whether the deliveries were shelved.
func (d *deliveries) isShelved() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shelf != nil
}

// shelve returns every delivery to the server with a delay of shelfDelay:
// pending, and redelivered only when refused again; no more InProgress.
// false once the deliveries were released (or were shelved already), or
// when a refusal could not be sent.
func (d *deliveries) shelve(nc *nats.Conn, now time.Time, entry runstore.Shelved) bool {
	d.mu.Lock()
	if d.released || d.shelf != nil {
		d.mu.Unlock()
		return false
	}
	d.shelf, d.shelvedAt, d.entry = nc, now, entry
	d.isShelf.Store(true)
	msgs := d.msgs[:len(d.msgs):len(d.msgs)]
	d.beating.Add(1)
	d.mu.Unlock()
	defer d.beating.Done()
	var failed error
	for _, m := range msgs {
		if err := m.NakWithDelay(shelfDelay); err != nil {
			failed = err
		}
	}
	if failed != nil {
		// Not sent (a disconnect): the deliveries are heartbeat on, and
		// shelved at a later beat.
		d.mu.Lock()
		d.shelf = nil
		d.isShelf.Store(false)
		d.mu.Unlock()
		return false
	}
	return true
}

// reshelve refuses the shelved deliveries again with a delay of
// shelfDelay when the last refusal is every old, so they do not come back
// while the run lives.
func (d *deliveries) reshelve(now time.Time, every time.Duration) {
	d.mu.Lock()
	if d.released || d.shelf == nil || now.Sub(d.shelvedAt) < every {
		d.mu.Unlock()
		return
	}
	d.shelvedAt = now
	nc, msgs := d.shelf, d.msgs[:len(d.msgs):len(d.msgs)]
	d.beating.Add(1)
	d.mu.Unlock()
	defer d.beating.Done()
	for _, m := range msgs {
		_ = settle.Retry(shelfDelay).ApplyReply(nc, m.Reply())
	}
}

// startBeats starts the heartbeat clock: the claim's delivery is fresh.
func (d *deliveries) startBeats(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastBeat = now
}

// beat tells the server the dispatch is still being worked on, when force
// says so or its last InProgress is every old.
func (d *deliveries) beat(now time.Time, every time.Duration, force bool) {
	d.mu.Lock()
	if d.released || d.shelf != nil || !force && now.Sub(d.lastBeat) < every {
		d.mu.Unlock()
		return
	}
	d.lastBeat = now
	msgs := d.msgs[:len(d.msgs):len(d.msgs)] // adopt appends past it
	d.beating.Add(1)
	d.mu.Unlock()
	defer d.beating.Done()
	for _, m := range msgs {
		_ = m.InProgress()
	}
}

// release settles every delivery as o says (settle.Leave leaves them to
// redelivery after their AckWait, shelved ones too), once the heartbeats
// on their way are sent, and stops adopting new ones. It returns the
// settles that failed, and whether the deliveries were shelved (and the
// shelf entry written for them).
func (d *deliveries) release(o settle.Outcome) (errs []error, shelved bool, entry runstore.Shelved) {
	d.mu.Lock()
	d.released = true
	msgs, nc, entry := d.msgs, d.shelf, d.entry
	d.mu.Unlock()
	d.beating.Wait()
	for _, m := range msgs {
		var err error
		if nc != nil {
			err = o.ApplyReply(nc, m.Reply())
		} else {
			err = o.Apply(m)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs, nc != nil, entry
}
