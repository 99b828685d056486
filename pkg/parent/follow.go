package parent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

// statusFollower wakes the Awaits of a Client when their run's status
// changes: one ordered consumer on every run's status subject
// (jetrun.run.*.status), started by the first Await in progress and stopped
// by the last, instead of a watch (a server consumer) per awaited run. An
// Await reads the row when woken; the status event is published after the
// row is written, so the read sees the change.
type statusFollower struct {
	c *Client

	mu       sync.Mutex
	waiting  map[string][]chan struct{} // run id → Awaits
	n        int                        // Awaits in progress
	cc       jetstream.ConsumeContext
	starting bool               // a goroutine is starting cc (run)
	giveUp   context.CancelFunc // ends that goroutine's tries
}

// followStartTimeout bounds one try to start the follower's consumer.
const followStartTimeout = 5 * time.Second

// add registers an Await of run id; the channel is signalled on each status
// event of the run. The first Await starts the follower in the background:
// while JetStream is away it is retried with backoff, and the Awaits rely on
// their periodic reads meanwhile. An Await never waits for the follower,
// and never holds the lock while JetStream is asked anything.
func (f *statusFollower) add(_ context.Context, id string) (chan struct{}, error) {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.cc == nil && !f.starting {
		ctx, cancel := context.WithCancel(context.Background())
		f.starting, f.giveUp = true, cancel
		go f.run(ctx)
	}
	if f.waiting == nil {
		f.waiting = make(map[string][]chan struct{})
	}
	f.waiting[id] = append(f.waiting[id], ch)
	return ch, nil
}

// run starts the follower's consumer, retrying with backoff, until it runs
// or no Await is left.
func (f *statusFollower) run(ctx context.Context) {
	bo := jsfault.NewBackOff(0)
	for {
		sctx, cancel := context.WithTimeout(ctx, followStartTimeout)
		cc, err := f.start(sctx)
		cancel()
		f.mu.Lock()
		switch {
		case f.n == 0:
			f.starting = false
			f.giveUp()
			f.mu.Unlock()
			if cc != nil {
				cc.Stop()
			}
			return
		case err == nil:
			f.cc, f.starting = cc, false
			f.giveUp()
			f.mu.Unlock()
			// A status event sent while the follower was starting woke no
			// one: every Await reads its row now.
			f.wakeAll()
			return
		}
		if ctx.Err() != nil {
			// The last Await left (giveUp) and another came meanwhile:
			// go on trying for it.
			ctx, f.giveUp = context.WithCancel(context.Background())
		}
		f.mu.Unlock()
		f.c.fault(context.Background(), "follow run statuses; Awaits read their rows meanwhile", err)
		_ = jsfault.Sleep(ctx, bo.NextBackOff())
	}
}

// wakeAll signals every Await.
func (f *statusFollower) wakeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, chs := range f.waiting {
		for _, ch := range chs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// remove ends an Await registered with add.
func (f *statusFollower) remove(id string, ch chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waiting[id] = slices.DeleteFunc(f.waiting[id], func(c chan struct{}) bool { return c == ch })
	if len(f.waiting[id]) == 0 {
		delete(f.waiting, id)
	}
	if f.n--; f.n == 0 {
		if f.cc != nil {
			f.cc.Stop()
			f.cc = nil
		}
		if f.starting {
			f.giveUp() // run sees n == 0 at once and ends
		}
	}
}

func (f *statusFollower) start(ctx context.Context) (jetstream.ConsumeContext, error) {
	ns := f.c.ns
	var ccs wire.ConsumeContexts
	for _, stream := range f.c.rt.EventsStreamNames() {
		cons, err := f.c.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects:    []string{ns.StatusWildcard()},
			DeliverPolicy:     jetstream.DeliverNewPolicy,
			InactiveThreshold: wire.FollowInactive,
		})
		if err != nil {
			ccs.Stop()
			return nil, fmt.Errorf("parent: follow run statuses: %w", err)
		}
		cc, err := f.consume(cons)
		if err != nil {
			ccs.Stop()
			return nil, err
		}
		ccs = append(ccs, cc)
	}
	return ccs, nil
}

// consume wakes the Awaits of the runs whose status events cons delivers.
func (f *statusFollower) consume(cons jetstream.Consumer) (jetstream.ConsumeContext, error) {
	cc, err := cons.Consume(func(m jetstream.Msg) {
		tokens := strings.Split(m.Subject(), ".") // <prefix>.run.<id>.status
		if len(tokens) != 4 {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, ch := range f.waiting[tokens[2]] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		f.c.log.Debug("follow run statuses", "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("parent: follow run statuses: %w", err)
	}
	return cc, nil
}
