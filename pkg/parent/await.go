package parent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"strings"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// cancelOnReturnTimeout bounds the cancel Run sends when its caller's context
// ends.
const cancelOnReturnTimeout = 5 * time.Second

// Result is what a completed run yields.
type Result struct {
	RunID   string
	Summary string
	Output  json.RawMessage
	// Row is the run's final row.
	Row *jetruntype.Run
}

// RunID derives a stable run id from the parent's identity and a tool call
// id, so a parent that re-issues the same tool call after a restart gets the
// same run back instead of a duplicate.
func RunID(parent, toolCallID string) string {
	sum := sha256.Sum256([]byte(parent + "\x00" + toolCallID))
	enc := base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:20])
	return "tc-" + strings.ToLower(enc)
}

// Run dispatches a run and waits for its outcome. A completed run returns
// its Result; any other outcome returns a *Failure as the error. The same run
// id again re-attaches to the live run or returns the stored outcome: it never
// starts a second execution. If ctx ends first, the run is cancelled and
// ctx's error returned.
func (c *Client) Run(ctx context.Context, req Request) (*Result, error) {
	row, _, err := c.dispatch(ctx, req)
	var refused *rejected
	if errors.As(err, &refused) {
		return &Result{RunID: refused.runID, Summary: asks.RejectedSummary, Output: asks.RejectedOutput(refused.answer)}, nil
	}
	if err != nil {
		return nil, err
	}
	res, err := c.Await(ctx, row.ID)
	if err != nil && ctx.Err() != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelOnReturnTimeout)
		defer cancel()
		if _, cerr := c.Cancel(cctx, row.ID, "the awaiting caller went away"); cerr != nil {
			c.log.WarnContext(cctx, "cancel run after the caller's context ended", "run_id", row.ID, "err", cerr)
		}
	}
	return res, err
}

// Await waits until the run settles: a final
// status, or interrupted with the child stopped. It does not cancel the run
// when ctx ends. An unknown run returns ErrRunNotFound.
func (c *Client) Await(ctx context.Context, id string) (*Result, error) {
	wake, err := c.statuses.add(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("parent: await run %s: %w", id, err)
	}
	defer c.statuses.remove(id, wake)
	// A status event wakes the wait; the row is the answer. The reads
	// between cover a change whose status event was lost or never sent,
	// and the re-attach budgets (reattachBudget.nextRead).
	budget := reattachBudget{began: time.Now(), noProgress: c.cfg.ReattachNoProgress, window: c.cfg.ReattachMaxWindow}
	reread := time.NewTimer(awaitReread)
	defer reread.Stop()
	for {
		row, err := c.awaitRead(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("parent: await run %s: %w", id, ctx.Err())
			}
			if errors.Is(err, runstore.ErrRunNotFound) {
				return nil, fmt.Errorf("parent: await: %w", err)
			}
			c.fault(ctx, "await: read run row; retrying", err, "run_id", id)
		} else if settled(row) {
			return outcome(row)
		} else if f := budget.check(row, time.Now()); f != nil {
			if f.Reason == events.ReasonWindowExceeded {
				c.giveUp(ctx, row.ID, f)
			}
			return nil, f
		}
		reread.Reset(budget.nextRead(time.Now()))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("parent: await run %s: %w", id, ctx.Err())
		case <-wake:
		case <-reread.C:
		}
	}
}

// awaitReread is the longest an Await goes without reading its row.
const awaitReread = 5 * time.Second

// budgetSlack is the least overrun of a re-attach budget an Await allows:
// it honours its budgets within a tenth of theirs or budgetSlack, whichever
// is larger.
const budgetSlack = 100 * time.Millisecond

// awaitReadTimeout bounds one read of an Await. A read that gets no answer
// (a replica catching up after a restart, a stream without a leader) would
// otherwise wait for as long as the caller's context: an Await of a run
// whose row turned final meanwhile would not see it.
const awaitReadTimeout = 5 * time.Second

// awaitRead reads the row of run id for an Await, bounded by
// awaitReadTimeout.
func (c *Client) awaitRead(ctx context.Context, id string) (*model.Row, error) {
	rctx, cancel := context.WithTimeout(ctx, awaitReadTimeout)
	defer cancel()
	row, _, err := c.store.Get(rctx, id)
	return row, err
}

// reattachBudget is an Await's patience: how long without a sign of
// progress, and how long in all.
type reattachBudget struct {
	began      time.Time
	noProgress time.Duration // negative: unlimited
	window     time.Duration // zero or negative: unlimited
	seen       string        // the row's progress fingerprint last read
	lastMoved  time.Time
}

// check returns the failure that ends the wait at now, or nil.
func (b *reattachBudget) check(r *model.Row, now time.Time) *Failure {
	if b.window > 0 && now.Sub(b.began) > b.window {
		return &Failure{RunID: r.ID, Status: events.StatusInterrupted, Retryable: true, Reason: events.ReasonWindowExceeded,
			Message: fmt.Sprintf("the caller waited past its window of %s; the run is stopped", b.window)}
	}
	if fp := progressMark(r); fp != b.seen || r.WaitingFor != "" || r.Status == events.StatusQueued || b.lastMoved.IsZero() {
		b.seen, b.lastMoved = fp, now
	}
	if b.noProgress < 0 || now.Sub(b.lastMoved) <= b.noProgress {
		return nil
	}
	msg := fmt.Sprintf("no sign of progress for %s; the run goes on and awaiting it again re-attaches", b.noProgress)
	if r.Status == events.StatusStarting {
		msg = fmt.Sprintf("no worker of agent type %s started it within %s; it stays queued and awaiting it again re-attaches",
			r.AgentType, b.noProgress)
	}
	return &Failure{RunID: r.ID, Status: events.StatusInterrupted, Retryable: true, Reason: events.ReasonNoProgress,
		ChildStillRunning: true, Message: msg}
}

// nextRead is how long after now an Await reads its row again unwoken: at
// the latest awaitReread after the last read; when the window ends; when
// the no-progress budget would run out; and often enough that progress is
// seen within a tenth of that budget (budgetSlack at least), so a run that
// stopped progressing is given up within that much of its budget.
// A budget that ran out unseen (the last read failed) adds no read of its
// own.
func (b *reattachBudget) nextRead(now time.Time) time.Duration {
	const past = time.Millisecond // a budget ends once exceeded
	d := awaitReread
	until := func(end time.Time) {
		if left := end.Sub(now); left >= 0 {
			d = min(d, left+past)
		}
	}
	if b.window > 0 {
		until(b.began.Add(b.window))
	}
	if b.noProgress >= 0 {
		d = min(d, max(b.noProgress/10, budgetSlack))
		if !b.lastMoved.IsZero() {
			until(b.lastMoved.Add(b.noProgress))
		}
	}
	return d
}

// progressMark changes whenever the row shows a sign of progress.
func progressMark(r *model.Row) string {
	var at int64
	if r.Progress != nil {
		at = r.Progress.At.UnixNano()
	}
	return fmt.Sprint(r.Status, r.Attempt, r.Chunks, r.Milestones, r.LastSignalAt.UnixNano(), at)
}

// giveUp ends a run an Await waited on past its window: interrupted
// (window-exceeded) and its child told to stop, as the reconciler does for
// a budget.
func (c *Client) giveUp(ctx context.Context, id string, f *Failure) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelOnReturnTimeout)
	defer cancel()
	now := time.Now()
	row, _, err := c.store.Mutate(ctx, id, func(r *model.Row) error {
		if !r.Live() || r.Status == events.StatusInterrupted {
			return runstore.ErrNoChange
		}
		held, err := c.store.Workers().HolderAlive(ctx, r)
		if err != nil {
			return err
		}
		return model.Apply(r, model.GaveUp{Reason: events.ReasonWindowExceeded, Error: f.Message, Held: held}, now)
	})
	if err != nil {
		c.log.WarnContext(ctx, "give up run past the caller's window", "run_id", id, "err", err)
		return
	}
	if row.Status == events.StatusInterrupted && row.Reason == events.ReasonWindowExceeded {
		c.announce(ctx, row)
		if row.ChildStillRunning {
			if err := wire.PublishCancelEvent(ctx, c.js, c.ns, row.CancelEvent(time.Now())); err != nil {
				c.log.WarnContext(ctx, "publish cancel", "run_id", id, "err", err)
			}
		}
	}
}

// settled reports whether a waiting parent has its answer.
func settled(r *model.Row) bool {
	return r.Status.Final() || (r.Status == events.StatusInterrupted && !r.ChildStillRunning)
}

func outcome(r *model.Row) (*Result, error) {
	if f := r.Failure(); f != nil {
		return nil, f
	}
	return &Result{RunID: r.ID, Summary: r.Summary, Output: r.Output, Row: r.View()}, nil
}

// Outcome is one settled run of RunAll.
type Outcome struct {
	RunID  string
	Result *Result
	Err    error // a *Failure, or what prevented the run
}

// RunAll dispatches every request, in order, then waits until all of them
// settled. Outcomes are in request order. Cancelling ctx cancels the runs
// still live.
func (c *Client) RunAll(ctx context.Context, reqs []Request) []Outcome {
	out := make([]Outcome, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		row, _, err := c.dispatch(ctx, req)
		if err != nil {
			out[i] = Outcome{RunID: req.RunID, Err: err}
			continue
		}
		out[i].RunID = row.ID
		wg.Go(func() {
			res, err := c.Await(ctx, row.ID)
			if err != nil && ctx.Err() != nil {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelOnReturnTimeout)
				defer cancel()
				_, _ = c.Cancel(cctx, row.ID, "the awaiting caller went away")
			}
			out[i].Result, out[i].Err = res, err
		})
	}
	wg.Wait()
	return out
}

// Cancel asks for the run to stop, together with its descendants (runs
// dispatched with Parent set to it, recursively), and returns its row. It is
// idempotent and never rewrites a final status. A run no worker holds (not
// yet started, or its worker lost) is aborted at once; a running one gets
// cancelRequested on its row, which its worker sees through a watch,
// told by a cancel event (jetrun.run.<id>.cancel), cancelling the handler's
// context and ending the run "aborted". An unknown
// run returns ErrRunNotFound. A cascade interrupted by a crash is
// completed by the reconciler.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*jetruntype.Run, error) {
	reason = cmp.Or(reason, "cancelled by request")
	row, err := c.cancelOne(ctx, id, reason)
	if err != nil {
		return nil, fmt.Errorf("parent: cancel run %s: %w", id, err)
	}
	c.cancelDescendants(ctx, id, "parent run "+id+" was cancelled")
	return row.View(), nil
}

func (c *Client) cancelOne(ctx context.Context, id, reason string) (*model.Row, error) {
	aborted := false
	now := time.Now()
	row, _, err := c.store.Mutate(ctx, id, func(r *model.Row) (err error) {
		aborted = false
		held, err := c.store.Workers().HolderAlive(ctx, r)
		if err != nil {
			return err
		}
		if err := model.Apply(r, model.CancelRequested{Reason: reason, Held: held}, now); err != nil {
			return err // runstore.ErrNoChange: final, or its cancel requested already
		}
		aborted = r.Status == events.StatusAborted
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case aborted:
		row = c.announce(ctx, row)
		c.advanceKey(ctx, row)
	case row.CancelRequested && row.Live() && row.Worker != "":
		// Tell the worker holding the run; a repeated Cancel tells it
		// again, and the reconciler does too if this notice is lost.
		if err := wire.PublishCancelEvent(ctx, c.js, c.ns, row.CancelEvent(time.Now())); err != nil {
			return nil, err
		}
	}
	return row, nil
}

// cancelDescendants cancels the live descendants of run id, breadth first,
// down to the maximum depth.
func (c *Client) cancelDescendants(ctx context.Context, id, reason string) {
	level := []string{id}
	for depth := 0; depth < c.cfg.MaxDepth && len(level) > 0; depth++ {
		var next []string
		for _, p := range level {
			children, err := c.store.Index().Children(ctx, p)
			if err != nil {
				c.log.WarnContext(ctx, "list children to cancel", "run_id", p, "err", err)
				continue
			}
			for _, ch := range children {
				if _, err := c.cancelOne(ctx, ch.ID, reason); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
					c.log.WarnContext(ctx, "cancel child run", "run_id", ch.ID, "parent", p, "err", err)
				}
				next = append(next, ch.ID)
			}
		}
		level = next
	}
}
