package pull

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// runnerIdle is how long a handler's goroutine waits for the loop's next
// message once its handler returned.
const runnerIdle = 2 * time.Second

// runners run the loop's handlers. A goroutine whose handler returned
// waits a while for the next message rather than end, so a busy loop
// rarely starts a handler on a fresh goroutine: a fresh goroutine's stack
// grows (is copied) while it decodes its first message, which cost a
// short run about a twentieth of its worker's CPU. At most keep goroutines
// wait at once, each at most runnerIdle, and none once done is closed.
type runners struct {
	handle func(msg jetstream.Msg) // runs one message's handler and settles it
	wg     *sync.WaitGroup         // counts the goroutines (Loop.Handlers)
	done   <-chan struct{}         // the loop's context's
	keep   int32

	next chan jetstream.Msg // unbuffered: a send succeeds only into a waiting goroutine
	idle atomic.Int32       // goroutines waiting on next
}

func newRunners(handle func(jetstream.Msg), wg *sync.WaitGroup, done <-chan struct{}, keep int) *runners {
	return &runners{handle: handle, wg: wg, done: done, keep: int32(keep), next: make(chan jetstream.Msg)}
}

// start runs msg's handler on a waiting goroutine, or on a new one.
func (r *runners) start(msg jetstream.Msg) {
	select {
	case r.next <- msg:
		return
	default:
	}
	r.wg.Add(1)
	go r.run(msg)
}

func (r *runners) run(msg jetstream.Msg) {
	defer r.wg.Done()
	var idle *time.Timer
	for {
		r.handle(msg)
		if r.idle.Add(1) > r.keep {
			r.idle.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(runnerIdle)
		} else {
			idle.Reset(runnerIdle)
		}
		select {
		case msg = <-r.next:
			r.idle.Add(-1)
		case <-idle.C:
			r.idle.Add(-1)
			return
		case <-r.done:
			r.idle.Add(-1)
			idle.Stop()
			return
		}
	}
}
