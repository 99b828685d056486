package finish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// deliver handles one message of handler name's consumer, a finish or a
// milestone notice, and says how to settle it.
func (d *Deliverer) deliver(ctx context.Context, name string, msg jetstream.Msg) settle.Outcome {
	if msg.Headers().Get(events.HeaderKind) == events.KindMilestoneNotice || wire.IsMilestoneNotice(msg.Data()) {
		return d.deliverNotice(ctx, name, msg)
	}
	return d.deliverFinish(ctx, name, msg)
}

// deliverFinish delivers one finish and says how to settle its message.
func (d *Deliverer) deliverFinish(ctx context.Context, name string, msg jetstream.Msg) settle.Outcome {
	var res Result
	if err := json.Unmarshal(msg.Data(), &res); err != nil || events.ValidateID(res.RunID) != nil || !res.Status.Terminal() {
		reason := "finish message is not a valid finish"
		if err != nil {
			reason += ": " + err.Error()
		}
		return d.deadLetter(ctx, name, msg, finishEntry{res}, claimed{}, reason, 0)
	}
	log := d.log.With("run_id", res.RunID, "status", res.Status, "handler", name)
	if err := d.vouch(ctx, res); errors.Is(err, ErrNotOwed) {
		return d.refuse(ctx, log, res, err)
	} else if err != nil {
		d.fault(ctx, log, "vouch for a finish", err)
		return settle.Retry(time.Second)
	}
	// Milestone notices go out before the run's finishes.
	if owed, err := d.noticesFirst(ctx, log, res); err != nil || owed {
		if err != nil {
			d.fault(ctx, log, "look for milestone notices before the finish", err)
		}
		return settle.Retry(time.Second)
	}
	return d.deliverEntry(ctx, log, name, msg, finishEntry{res})
}

// vouch says whether a transition jetrun made owes res:
// nil, an error wrapping ErrNotOwed, or why it cannot tell now. A final
// status is reached once and never left, so its finish has one ending: a
// later one (<runId>.<status>.<n>) was written by someone else.
func (d *Deliverer) vouch(ctx context.Context, res Result) error {
	if res.Status.Final() && res.Ending > 0 {
		return fmt.Errorf("%w: a final status ends a run once, this is its ending %d", ErrNotOwed, res.Ending+1)
	}
	if d.cfg.Vouch == nil {
		return nil
	}
	return d.cfg.Vouch(ctx, res)
}

// refuse drops res, which no transition of jetrun owes (someone rewrote
// the run's row or published its status event): it says so at ERROR and
// records the finish as given up on the row, if the row still owes that
// ending, so the reconciler does not publish it again.
func (d *Deliverer) refuse(ctx context.Context, log *slog.Logger, res Result, why error) settle.Outcome {
	log.ErrorContext(ctx, "a finish no jetrun transition owes: refused, not delivered (someone rewrote the run's row "+
		"or published its status event)", "ending", res.Ending, "err", why)
	refused := model.FinishReleased{Status: res.Status, Ending: res.Ending, Cause: "refused: " + why.Error(), Failed: true}
	now := time.Now()
	_, _, err := d.store.Mutate(ctx, res.RunID, func(r *model.Row) error {
		fs := r.Finishes[res.Status]
		if fs == nil || fs.Ending != res.Ending || !r.FinishOwed(res.Status) {
			return model.ErrNoChange
		}
		return model.Apply(r, refused, now)
	})
	if err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
		d.fault(ctx, log, "record a refused finish", err)
	}
	return settle.Ack()
}

// An entry is one slot of a run's delivery ledger (model.Row) on its
// way to handler name: a finish (finishEntry) or a milestone notice
// (noticeEntry, notice.go). The steps are the same for both and written
// once — deliverEntry claims the slot, calls the handler, then marks it
// delivered, or releases it for a retry, or dead-letters it — and an entry
// supplies only what differs: its ledger operations, its handler call and
// its words (entryKind).
type entry interface {
	kind() *entryKind
	runID() string
	// attrs name the slot in logs and events: "status", s or
	// "milestone", name.
	attrs() []any
	// about ends a dead-letter reason's "handler <name> failed ..." with
	// the slot when the status does not say it: "" or " on milestone <name>".
	about() string
	// ledgered reports whether the entry names a slot a dead-letter can
	// record its failure on.
	ledgered() bool
	// reportedAs is the handler a delivery is reported under, given the
	// name of the consumer's handler.
	reportedAs(name string) string

	check(r *model.Row, now time.Time) (model.Delivery, time.Duration)
	// claim takes the slot on r and returns the attempt it starts.
	claim(r *model.Row, by string, until, now time.Time) int
	// spent reports whether the attempt claimed on r is the last of limit;
	// backoff is the wait after it fails, from base up to ceiling. The
	// slot decides both (model.Row.FinishSpent, FinishBackoff).
	spent(r *model.Row, limit int) bool
	backoff(r *model.Row, base, ceiling time.Duration) time.Duration
	// delivered marks the slot delivered on r and returns attributes for
	// the obs.FinishDelivered event.
	delivered(r *model.Row, now time.Time) ([]any, error)
	release(r *model.Row, cause string, failed bool, now time.Time) error
	// handle calls the handler name on the claimed row (through d.call).
	handle(ctx context.Context, d *Deliverer, name string, msg jetstream.Msg, row *model.Row) error
}

// entryKind is what a kind of entry's logs say — the word for its handler,
// the messages (and throttling keys) of its faults — and what it reports.
type entryKind struct {
	what string // "<what> handler failed; retrying", and call's panic log
	// cleared is logged at info level for an entry of a cleared run; "" logs
	// nothing.
	cleared string
	// Fault messages: reading the row, claiming, marking delivered,
	// releasing, dead-lettering.
	readRow, claim, markDelivered, release, deadLettering string
	// counted: the Observer hears of deliveries, retries and dead-letters.
	counted bool
	// traced: logs after the claim carry the run's trace id.
	traced bool
}

// finishKind and noticeKind are the words of finishes and milestone
// notices.
var (
	finishKind = entryKind{
		what: "finish", cleared: "finish for a cleared run; dropping it",
		readRow: "read row for delivery", claim: "claim delivery",
		markDelivered: "mark finish delivered; it is delivered again",
		release:       "record delivery failure",
		deadLettering: "dead-letter finish; keeping it for a retry",
		counted:       true, traced: true,
	}
	noticeKind = entryKind{
		what:    "milestone",
		readRow: "read row for a milestone notice", claim: "claim milestone notice",
		markDelivered: "mark milestone notice delivered; it is delivered again",
		release:       "record milestone notice failure",
		deadLettering: "dead-letter milestone notice; keeping it for a retry",
	}
)

// finishEntry is the finish res: its slot is Finishes[res.Status].
type finishEntry struct{ res Result }

func (finishEntry) kind() *entryKind           { return &finishKind }
func (e finishEntry) runID() string            { return e.res.RunID }
func (e finishEntry) attrs() []any             { return []any{"status", e.res.Status} }
func (finishEntry) about() string              { return "" }
func (e finishEntry) ledgered() bool           { return events.ValidateID(e.res.RunID) == nil }
func (e finishEntry) reportedAs(string) string { return e.res.Handler }

// A copy of an earlier ending of the status (the run was resumed and
// ended so again, model.Row.StaleFinish) is done, and its delivery
// under way records nothing on the later ending's slot.

func (e finishEntry) check(r *model.Row, now time.Time) (model.Delivery, time.Duration) {
	if r.StaleFinish(e.res) {
		return model.DeliveryDone, 0
	}
	return r.CheckFinish(e.res.Status, now)
}

func (e finishEntry) claim(r *model.Row, by string, until, now time.Time) int {
	_ = model.Apply(r, model.FinishClaimed{Status: e.res.Status, Finish: e.res, By: by, Until: until}, now) // never refused
	return r.FinishAttempts(e.res.Status)
}

func (e finishEntry) spent(r *model.Row, limit int) bool {
	return r.FinishSpent(e.res.Status, limit)
}

func (e finishEntry) backoff(r *model.Row, base, ceiling time.Duration) time.Duration {
	return r.FinishBackoff(e.res.Status, base, ceiling)
}

func (e finishEntry) delivered(r *model.Row, now time.Time) ([]any, error) {
	if err := model.Apply(r, model.FinishDelivered{Status: e.res.Status, Ending: e.res.Ending}, now); err != nil {
		return nil, err // ErrNoChange: a copy of an earlier ending
	}
	var due time.Time
	if fs := r.Finishes[e.res.Status]; fs != nil {
		due = fs.DueAt
	}
	return []any{"latency_ms", now.Sub(due).Milliseconds()}, nil
}

func (e finishEntry) release(r *model.Row, cause string, failed bool, now time.Time) error {
	return model.Apply(r, model.FinishReleased{Status: e.res.Status, Ending: e.res.Ending, Cause: cause, Failed: failed}, now)
}

func (e finishEntry) handle(ctx context.Context, d *Deliverer, name string, msg jetstream.Msg, row *model.Row) error {
	return d.call(ctx, "finish", name, msg, func(ctx context.Context) error {
		return d.handlers[name].ServeFinish(ctx, row.View(), e.res)
	})
}

// deliverEntry delivers e to handler name and says how to settle its
// message: claim, call, then mark delivered, retry (after the handler's
// RetryAfter delay, or with backoff), or dead-letter (at once on the
// handler's Cancel).
func (d *Deliverer) deliverEntry(ctx context.Context, log *slog.Logger, name string, msg jetstream.Msg, e entry) settle.Outcome {
	k := e.kind()
	c, o := d.claim(ctx, log, e)
	if c.row == nil {
		return o
	}
	if id := c.row.Trace().TraceID(); id != "" && k.traced {
		log = log.With("trace_id", id)
	}
	attempts := c.attempts
	err := e.handle(ctx, d, name, msg, c.row)
	var (
		cancelled *jetruntype.CancelError
		retry     *jetruntype.RetryError
	)
	switch {
	case err == nil:
		return d.markDelivered(ctx, log, name, e, c, attempts)
	case ctx.Err() != nil: // shutting down: release the claim, retry soon
		d.release(log, e, c, err, false)
		return settle.Retry(time.Second)
	case errors.As(err, &cancelled):
		log.ErrorContext(ctx, k.what+" handler failed permanently; giving up", "attempts", attempts, "err", err)
		return d.deadLetter(ctx, name, msg, e, c, fmt.Sprintf("handler %s failed permanently%s: %v", name, e.about(), err), attempts)
	case c.last:
		log.ErrorContext(ctx, k.what+" handler failed; giving up", "attempts", attempts, "err", err)
		return d.deadLetter(ctx, name, msg, e, c, fmt.Sprintf("handler %s failed %d times%s; last error: %v", name, attempts, e.about(), err), attempts)
	}
	delay := c.backoff
	if errors.As(err, &retry) && retry.Delay > 0 {
		delay = retry.Delay
	}
	log.WarnContext(ctx, k.what+" handler failed; retrying", "attempts", attempts, "retry_in", delay, "err", err)
	d.release(log, e, c, err, false)
	if k.counted && d.cfg.Observer != nil {
		d.cfg.Observer.FinishFailed(name)
	}
	obs.Report(ctx, d.log, obs.FinishRetry, e.runID(), append(e.attrs(), "handler", name, "attempts", attempts, "error", err)...)
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

// claim reads the row and takes the delivery of e. When there is nothing to
// deliver now it returns a claimed without a row and how to settle the
// message.
func (d *Deliverer) claim(ctx context.Context, log *slog.Logger, e entry) (claimed, settle.Outcome) {
	k := e.kind()
	for try := 0; try < 10; try++ {
		row, rev, err := d.store.Get(ctx, e.runID())
		if errors.Is(err, runstore.ErrRunNotFound) {
			if k.cleared != "" {
				log.InfoContext(ctx, k.cleared)
			}
			return claimed{}, settle.Ack()
		}
		if err != nil {
			d.fault(ctx, log, k.readRow, err)
			return claimed{}, settle.Retry(time.Second)
		}
		now := time.Now()
		switch check, wait := e.check(row, now); check {
		case model.DeliveryDone:
			return claimed{}, settle.Ack()
		case model.DeliveryLater:
			return claimed{}, settle.Retry(wait + settle.Jitter(maxJitter))
		}
		next := row.Clone()
		attempts := e.claim(next, d.cfg.ID, now.Add(d.cfg.Timeout+time.Second), now)
		newRev, err := d.store.Update(ctx, next, rev)
		if err != nil {
			if errors.Is(err, runstore.ErrConflict) {
				continue
			}
			d.fault(ctx, log, k.claim, err)
			return claimed{}, settle.Retry(time.Second)
		}
		return claimed{row: next, rev: newRev, attempts: attempts, last: e.spent(next, d.cfg.MaxAttempts),
			backoff: e.backoff(next, d.cfg.RetryDelay, MaxRetryDelay)}, settle.Leave()
	}
	return claimed{}, settle.Retry(time.Second)
}

// claimed is the row as a delivery's claim left it, so the writes that
// follow start from it (runstore.Store.MutateFrom), and what its slot
// decided of the attempt then (the handler gets the row: what it does to
// it decides nothing); the zero value knows no row.
type claimed struct {
	row      *model.Row
	rev      uint64
	attempts int           // the attempt the claim started, for logs and reasons
	last     bool          // it is the last of Config.MaxAttempts: a failure gives up
	backoff  time.Duration // the wait after it fails: RetryDelay doubled per attempt, at most MaxRetryDelay
}

// call runs one handler call (what: finish or milestone) with the
// configured timeout, heartbeating msg meanwhile so it is not redelivered
// under the call; a panic is the call's error.
func (d *Deliverer) call(ctx context.Context, what, name string, msg jetstream.Msg, fn func(ctx context.Context) error) (err error) {
	stop := settle.KeepAlive(ctx, msg, max(d.cfg.Timeout/3, 100*time.Millisecond))
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	defer func() {
		stop()
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
func (d *Deliverer) markDelivered(ctx context.Context, log *slog.Logger, name string, e entry, c claimed, attempts int) settle.Outcome {
	now := time.Now()
	var more []any
	row, _, err := d.store.MutateFrom(ctx, e.runID(), c.row, c.rev, func(r *model.Row) (err error) {
		more, err = e.delivered(r, now)
		return err
	})
	if err != nil {
		// The claim expires and the entry is delivered again: at least once.
		d.fault(ctx, log, e.kind().markDelivered, err)
		return settle.Leave()
	}
	handler := e.reportedAs(name)
	if e.kind().counted && d.cfg.Observer != nil {
		d.cfg.Observer.FinishDelivered(handler)
	}
	obs.Report(ctx, d.log, obs.FinishDelivered, e.runID(), append(append(e.attrs(), "handler", handler, "attempts", attempts), more...)...)
	if err := d.store.Index().UnindexIfSettled(ctx, row); err != nil {
		log.WarnContext(ctx, "unindex settled run", "err", err)
	}
	return settle.Ack()
}

// release drops the claim after a failed attempt, recording the error; with
// failed it also records that delivery was given up.
func (d *Deliverer) release(log *slog.Logger, e entry, c claimed, cause error, failed bool) *model.Row {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var text string
	if cause != nil {
		text = cause.Error()
	}
	now := time.Now()
	row, _, err := d.store.MutateFrom(ctx, e.runID(), c.row, c.rev, func(r *model.Row) error {
		return e.release(r, text, failed, now)
	})
	if err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
		d.fault(ctx, log, e.kind().release, err)
	}
	return row
}

// deadLetter files msg in the dead-letter stream (jetrun.dlq.finish.<name>)
// and records the failure on the row; the message is then terminated. If
// the dead-letter write fails, the message is retried.
func (d *Deliverer) deadLetter(ctx context.Context, name string, msg jetstream.Msg, e entry, c claimed, reason string, attempts int) settle.Outcome {
	k := e.kind()
	if _, err := d.js.PublishMsg(ctx, wire.DeadLetter(d.ns.DLQFinishSubject(name), msg, reason)); err != nil {
		d.fault(ctx, d.log, k.deadLettering, err, "handler", name)
		return settle.Retry(5 * time.Second)
	}
	if e.ledgered() {
		row := d.release(d.log, e, c, errors.New(reason), true)
		if err := d.store.Index().UnindexIfSettled(ctx, row); err != nil {
			d.log.WarnContext(ctx, "unindex settled run", "run_id", e.runID(), "err", err)
		}
	}
	if k.counted && d.cfg.Observer != nil {
		d.cfg.Observer.FinishDeadLettered(name)
	}
	obs.Report(ctx, d.log, obs.FinishFailed, e.runID(), append(e.attrs(), "handler", name, "attempts", attempts, "reason", reason)...)
	return settle.Term(reason)
}
