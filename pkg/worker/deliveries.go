package worker

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/settle"
)

// deliveries are the deliveries of a run's dispatch an attempt holds: the
// one it was claimed with and the redeliveries it adopted while it runs.
// They are heartbeat (InProgress, not an outcome) while the attempt lives,
// and settled together once it ends (release). Its lock guards the list
// and is never held while a delivery is sent anything: a release waits
// for the heartbeats already on their way, so no InProgress follows a
// delivery's outcome.
type deliveries struct {
	mu       sync.Mutex
	msgs     []jetstream.Msg
	released bool
	lastBeat time.Time      // the last InProgress
	beating  sync.WaitGroup // heartbeats on their way
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
// deliveries were released.
func (d *deliveries) adopt(msg jetstream.Msg) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.released {
		return false
	}
	d.msgs = append(d.msgs, msg)
	return true
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
	if d.released || !force && now.Sub(d.lastBeat) < every {
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
// redelivery), once the heartbeats on their way are sent, and stops
// adopting new ones. It returns the settles that failed.
func (d *deliveries) release(o settle.Outcome) []error {
	d.mu.Lock()
	d.released = true
	msgs := d.msgs
	d.mu.Unlock()
	d.beating.Wait()
	var errs []error
	for _, m := range msgs {
		if err := o.Apply(m); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
