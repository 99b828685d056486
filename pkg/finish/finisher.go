package finish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// The finisher.
//
// A transition that makes a finish owed (a detached run with a finish
// handler reaching a final status, or interrupted) records the debt on the
// run's row (its finishes ledger) and publishes the status event with the
// header Jetrun-Finish-Owed: <status> (engine.Runtime.Announce). Whoever makes
// the transition (a child-worker, a parent client's cancel, the reconciler)
// never publishes to jetrun.finish.>: the finisher does. Every Deliverer
// runs one (parent-worker always runs a Deliverer): a core NATS queue
// subscription (queue group <prefix>-finisher) on jetrun.run.*.status, so
// one finisher of the fleet sees each status event. For an event with the
// header it reads the row and, while the ledger still owes the finish,
// publishes it to jetrun.finish.<handler> with Nats-Msg-Id
// <runId>.<status>: a status event handled twice stores one finish.
//
// A status event no finisher saw (none was running, the connection was
// down, the subscription fell behind) leaves the finish owed on the row:
// the reconciler republishes it after one interval (pkg/reconcile). So the
// guarantee is unchanged: exactly once on the happy path, at least once
// under a crash.

// finisherWorkers is how many status events a finisher handles at once.
const finisherWorkers = 8

// finisherRetry bounds the retries of one finish publish; past it the
// reconciler republishes.
const finisherRetry = 10 * time.Second

type finisher struct {
	d    *Deliverer
	sub  *nats.Subscription
	work chan *nats.Msg
	wg   sync.WaitGroup
}

// startFinisher subscribes to every run's status events.
func (d *Deliverer) startFinisher(runCtx context.Context) error {
	f := &finisher{d: d, work: make(chan *nats.Msg, 1024)}
	ns := d.ns
	sub, err := d.js.Conn().QueueSubscribe(ns.StatusWildcard(), ns.FinisherQueue(), func(m *nats.Msg) {
		if m.Header.Get(events.HeaderFinishOwed) == "" {
			return
		}
		select {
		case f.work <- m:
		case <-runCtx.Done():
		}
	})
	if err != nil {
		return fmt.Errorf("finish: subscribe to status events for the finisher: %w", err)
	}
	// A finisher that cannot keep up loses events, not memory: the
	// reconciler republishes what it missed.
	_ = sub.SetPendingLimits(65536, 64<<20)
	f.sub = sub
	for range finisherWorkers {
		f.wg.Go(func() {
			for {
				select {
				case m := <-f.work:
					f.publish(runCtx, m)
				case <-runCtx.Done():
					return
				}
			}
		})
	}
	d.finisher = f
	return nil
}

// stop unsubscribes; the workers end with their context.
func (f *finisher) stop() {
	_ = f.sub.Unsubscribe()
}

// publish handles one status event that names an owed finish.
func (f *finisher) publish(ctx context.Context, m *nats.Msg) {
	d := f.d
	st := events.Status(m.Header.Get(events.HeaderFinishOwed))
	var ev events.StatusEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil || events.ValidateID(ev.RunID) != nil || !st.Terminal() {
		return
	}
	log := d.log.With("run_id", ev.RunID, "status", st)
	err := jsfault.Retry(ctx, finisherRetry, func(ctx context.Context) error {
		for try := range 5 {
			row, _, err := d.store.Get(ctx, ev.RunID)
			if errors.Is(err, runstore.ErrRunNotFound) {
				return nil // cleared
			}
			if err != nil {
				return err
			}
			if row.Finishes[st] == nil {
				// A replica behind its leader answered with the row
				// before the transition: ask again.
				time.Sleep(time.Duration(try+1) * 20 * time.Millisecond)
				continue
			}
			if !row.FinishOwed(st) {
				return nil
			}
			_, err = d.rt.PublishFinish(ctx, row, st)
			return err
		}
		return nil // the reconciler looks again
	})
	if err != nil && ctx.Err() == nil {
		d.fault(ctx, log, "publish an owed finish; the reconciler republishes it", err)
	}
}
