package parent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// statusFollower wakes the Awaits of a Client when their run's status
// changes: one ordered consumer on every run's status subject
// (jetrun.run.*.status), started by the first Await in progress and stopped
// by the last, instead of a watch (a server consumer) per awaited run. An
// Await reads the row when woken; the status event is published after the
// row is written, so the read sees the change.
type statusFollower struct {
	c *Client

	mu      sync.Mutex
	waiting map[string][]chan struct{} // run id → Awaits
	n       int                        // Awaits in progress
	cc      jetstream.ConsumeContext
}

// add registers an Await of run id; the channel is signalled on each status
// event of the run.
func (f *statusFollower) add(ctx context.Context, id string) (chan struct{}, error) {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		cc, err := f.start(ctx)
		if err != nil {
			return nil, err
		}
		f.cc = cc
	}
	f.n++
	if f.waiting == nil {
		f.waiting = make(map[string][]chan struct{})
	}
	f.waiting[id] = append(f.waiting[id], ch)
	return ch, nil
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
		f.cc.Stop()
		f.cc = nil
	}
}

func (f *statusFollower) start(ctx context.Context) (jetstream.ConsumeContext, error) {
	ns := f.c.cfg.Namespace
	cons, err := f.c.js.OrderedConsumer(ctx, ns.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{ns.StatusWildcard()},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("parent: follow run statuses: %w", err)
	}
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
