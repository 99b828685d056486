package finish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/settle"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/jsfault"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/obs"
)

// deliver handles one message of handler name's consumer: a finish or a
// milestone notice.
func (d *Deliverer) deliver(ctx context.Context, name string, msg jetstream.Msg) {
	log := d.log.With("handler", name)
	if msg.Headers().Get(events.HeaderKind) == events.KindMilestoneNotice || events.IsMilestoneNotice(msg.Data()) {
		d.settle(ctx, log, msg, d.deliverNotice(ctx, name, msg))
		return
	}
	d.settle(ctx, log, msg, d.deliverFinish(ctx, name, msg))
}

// deliverFinish delivers one finish and says how to settle its message.
func (d *Deliverer) deliverFinish(ctx context.Context, name string, msg jetstream.Msg) settle.Outcome {
	var res Result
	if err := json.Unmarshal(msg.Data(), &res); err != nil || events.ValidateID(res.RunID) != nil || !res.Status.Terminal() {
		reason := "finish message is not a valid finish"
		if err != nil {
			reason += ": " + err.Error()
		}
		return d.deadLetter(ctx, name, msg, res, claimed{}, reason, 0)
	}
	log := d.log.With("run_id", res.RunID, "status", res.Status, "handler", name)
	// Milestone notices go out before the run's finishes.
	if owed, err := d.noticesFirst(ctx, log, res); err != nil || owed {
		if err != nil {
			d.fault(ctx, log, "look for milestone notices before the finish", err)
		}
		return settle.Retry(time.Second)
	}

	c, o := d.claim(ctx, log, res)
	if c.row == nil {
		return o
	}
	if id := c.row.Trace().TraceID(); id != "" {
		log = log.With("trace_id", id)
	}
	attempts := c.attempts
	err := d.invoke(ctx, name, msg, c.row, res)
	switch {
	case err == nil:
		return d.markDelivered(ctx, log, res, c, attempts)
	case ctx.Err() != nil: // shutting down: release the claim, retry soon
		d.release(log, res, c, err, false)
		return settle.Retry(time.Second)
	case IsPermanent(err):
		log.ErrorContext(ctx, "finish handler failed permanently; giving up", "attempts", attempts, "err", err)
		return d.deadLetter(ctx, name, msg, res, c, fmt.Sprintf("handler %s failed permanently: %v", name, err), attempts)
	case attempts >= d.cfg.MaxAttempts:
		log.ErrorContext(ctx, "finish handler failed; giving up", "attempts", attempts, "err", err)
		return d.deadLetter(ctx, name, msg, res, c, fmt.Sprintf("handler %s failed %d times; last error: %v", name, attempts, err), attempts)
	}
	delay := d.backoff(attempts)
	log.WarnContext(ctx, "finish handler failed; retrying", "attempts", attempts, "retry_in", delay, "err", err)
	d.release(log, res, c, err, false)
	if d.cfg.Observer != nil {
		d.cfg.Observer.FinishFailed(name)
	}
	obs.Report(ctx, d.log, obs.FinishRetry, res.RunID, "status", res.Status, "handler", name, "attempts", attempts, "error", err)
	return settle.Retry(delay)
}

// fault logs a failed JetStream call at warn level, at most once per
// obs.DefaultLogEvery for each message and class of fault (jsfault), with
// the count of what was left out: during an outage every finish fails the
// same way, and one line says so.
func (d *Deliverer) fault(ctx context.Context, log *slog.Logger, msg string, err error, args ...any) {
	class := jsfault.Classify(ctx, err).String()
	d.logs.Log(ctx, log, slog.LevelWarn, msg+"/"+class, msg, append(args, "fault", class, "err", err)...)
}

// claim reads the row and takes the delivery. When there is nothing to
// deliver now it returns a claimed without a row and how to settle the
// message.
func (d *Deliverer) claim(ctx context.Context, log *slog.Logger, res Result) (claimed, settle.Outcome) {
	for try := 0; try < 10; try++ {
		row, rev, err := d.store.Get(ctx, res.RunID)
		if errors.Is(err, kv.ErrRunNotFound) {
			log.InfoContext(ctx, "finish for a cleared run; dropping it")
			return claimed{}, settle.Ack()
		}
		if err != nil {
			d.fault(ctx, log, "read row for delivery", err)
			return claimed{}, settle.Retry(time.Second)
		}
		now := time.Now()
		switch check, wait := row.CheckFinish(res.Status, now); check {
		case jetruntype.DeliveryDone:
			return claimed{}, settle.Ack()
		case jetruntype.DeliveryLater:
			return claimed{}, settle.Retry(wait + settle.Jitter(maxJitter))
		}
		next := row.Clone()
		attempts := next.ClaimFinish(res.Status, res, d.cfg.ID, now.Add(d.cfg.Timeout+time.Second), now)
		newRev, err := d.store.Update(ctx, next, rev)
		if err != nil {
			if errors.Is(err, kv.ErrConflict) {
				continue
			}
			d.fault(ctx, log, "claim delivery", err)
			return claimed{}, settle.Retry(time.Second)
		}
		return claimed{row: next, rev: newRev, attempts: attempts}, settle.Leave()
	}
	return claimed{}, settle.Retry(time.Second)
}

// claimed is the row as a delivery's claim left it, so the writes that
// follow start from it (kv.Store.MutateFrom); the zero value knows no row.
type claimed struct {
	row      *jetruntype.Run
	rev      uint64
	attempts int // the attempt the claim started
}

// invoke runs the finish handler name on res; see call.
func (d *Deliverer) invoke(ctx context.Context, name string, msg jetstream.Msg, row *jetruntype.Run, res Result) error {
	return d.call(ctx, "finish", name, msg, func(ctx context.Context) error {
		return d.handlers[name].HandleFinish(ctx, row, res)
	})
}

// call runs one handler call (what: finish or milestone) with the
// configured timeout, heartbeating msg meanwhile so it is not redelivered
// under the call; a panic is the call's error.
func (d *Deliverer) call(ctx context.Context, what, name string, msg jetstream.Msg, fn func(ctx context.Context) error) (err error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(d.cfg.Timeout/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
			d.log.ErrorContext(ctx, what+" handler panicked", "handler", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	if err := fn(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("handler ran past its %s timeout", d.cfg.Timeout)
	}
	return nil
}

// markDelivered records the delivery; the message is then acknowledged.
func (d *Deliverer) markDelivered(ctx context.Context, log *slog.Logger, res Result, c claimed, attempts int) settle.Outcome {
	now := time.Now()
	var due time.Time
	row, _, err := d.store.MutateFrom(ctx, res.RunID, c.row, c.rev, func(r *jetruntype.Run) error {
		due = r.FinishDelivered(res.Status, now)
		return nil
	})
	if err != nil {
		// The claim expires and the finish is delivered again: at least once.
		d.fault(ctx, log, "mark finish delivered; it is delivered again", err)
		return settle.Leave()
	}
	if d.cfg.Observer != nil {
		d.cfg.Observer.FinishDelivered(res.Handler)
	}
	obs.Report(ctx, d.log, obs.FinishDelivered, res.RunID, "status", res.Status, "handler", res.Handler,
		"attempts", attempts, "latency_ms", now.Sub(due).Milliseconds())
	if err := d.store.UnindexIfSettled(ctx, row); err != nil {
		log.WarnContext(ctx, "unindex settled run", "err", err)
	}
	return settle.Ack()
}

// release drops the claim after a failed attempt, recording the error; with
// failed it also records that delivery was given up.
func (d *Deliverer) release(log *slog.Logger, res Result, c claimed, cause error, failed bool) *jetruntype.Run {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var text string
	if cause != nil {
		text = cause.Error()
	}
	row, _, err := d.store.MutateFrom(ctx, res.RunID, c.row, c.rev, func(r *jetruntype.Run) error {
		return r.ReleaseFinish(res.Status, text, failed, time.Now())
	})
	if err != nil && !errors.Is(err, kv.ErrRunNotFound) {
		d.fault(ctx, log, "record delivery failure", err)
	}
	return row
}

// deadLetter files msg in the dead-letter stream and records the failure
// on the row; the message is then terminated. If the dead-letter write
// fails, the message is retried.
func (d *Deliverer) deadLetter(ctx context.Context, name string, msg jetstream.Msg, res Result, c claimed, reason string, attempts int) settle.Outcome {
	if _, err := d.js.PublishMsg(ctx, events.DeadLetter(d.ns.DLQFinishSubject(name), msg, reason)); err != nil {
		d.fault(ctx, d.log, "dead-letter finish; keeping it for a retry", err, "handler", name)
		return settle.Retry(5 * time.Second)
	}
	if events.ValidateID(res.RunID) == nil {
		row := d.release(d.log, res, c, errors.New(reason), true)
		if err := d.store.UnindexIfSettled(ctx, row); err != nil {
			d.log.WarnContext(ctx, "unindex settled run", "run_id", res.RunID, "err", err)
		}
	}
	if d.cfg.Observer != nil {
		d.cfg.Observer.FinishDeadLettered(name)
	}
	obs.Report(ctx, d.log, obs.FinishFailed, res.RunID, "status", res.Status, "handler", name, "attempts", attempts, "reason", reason)
	return settle.Term(reason)
}
