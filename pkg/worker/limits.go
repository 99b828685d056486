package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/pkg/worker/internal/runhook"
)

// Provider limits on a worker (Run.Reserve with Limit; package
// internal/engine/limits). The worker starts one Limiter at the first
// reservation that names a limit; it leases slices of the limits from the
// cluster and serves its runs' reservations from them. A reservation that
// must wait shows on its run's row as waiting for "limit:<name>", which
// the no-progress budget does not count. Each usage report settles the
// run's oldest open grant with the real tokens (report a call's usage in
// one report); the attempt's end releases the rest. A handler that returns jetruntype.RetryAfter(err, d) after
// reserving on a limit reports the provider's 429: the limit pauses for d
// across the fleet.

// ErrUnknownLimit is returned (wrapped, naming the configured limits) by
// Run.Reserve for a limit no one configured.
var ErrUnknownLimit = limits.ErrUnknownLimit

// Limit makes a reservation also wait, bounded and cancellable by its
// context, for room on the provider limit name, shared by every worker of
// the fleet (docs/operations.md, "Provider limits"): one request, the
// reservation's input and output tokens, one concurrent call. Waiting
// reservations are served fairly by the dispatch's tenant.
func Limit(name string) ReserveOption {
	return func(o *reserveOptions) { o.limit = name }
}

// workerLimits is a worker's Limiter, started at the first reservation on a
// limit.
type workerLimits struct {
	mu sync.Mutex
	l  *limits.Limiter
}

// limiter returns the worker's Limiter, starting it the first time.
func (w *Worker) limiter(ctx context.Context) (*limits.Limiter, error) {
	w.lim.mu.Lock()
	defer w.lim.mu.Unlock()
	if w.lim.l != nil {
		return w.lim.l, nil
	}
	st, err := limits.Open(ctx, w.js, w.ns, w.rt.Streams().Replicas)
	if err != nil {
		return nil, fmt.Errorf("worker: provider limits: %w", err)
	}
	l, err := limits.New(limits.Config{Store: st, Worker: w.cfg.ID, Lease: w.cfg.Lease, Logger: w.log})
	if err == nil {
		err = l.Start(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: provider limits: %w", err)
	}
	w.lim.l = l
	return l, nil
}

// stopLimiter returns what the worker holds of the limits.
func (w *Worker) stopLimiter(ctx context.Context) {
	w.lim.mu.Lock()
	l := w.lim.l
	w.lim.mu.Unlock()
	if l != nil {
		l.Stop(ctx)
	}
}

// execLimits is an attempt's grants on limits; mu is a leaf lock.
type execLimits struct {
	mu    sync.Mutex
	open  []*limits.Grant
	names []string // the limits the attempt reserved on
}

// reserveLimit waits for room on req's limit (none named: nil).
func (e *execution) reserveLimit(ctx context.Context, req runhook.ReserveRequest) (*limits.Grant, error) {
	if req.Limit == "" {
		return nil, nil
	}
	l, err := e.w.limiter(ctx)
	if err != nil {
		return nil, err
	}
	tenant := e.row.Tenant
	tokens := req.Usage.InputTokens + req.Usage.OutputTokens
	end := e.rw.beginWait("limit:" + req.Limit)
	g, err := l.Reserve(ctx, req.Limit, tenant, tokens)
	end()
	if err != nil {
		return nil, fmt.Errorf("worker: reserve for run %s on limit %s: %w", e.id, req.Limit, err)
	}
	e.lims.mu.Lock()
	e.lims.open = append(e.lims.open, g)
	if !contains(e.lims.names, req.Limit) {
		e.lims.names = append(e.lims.names, req.Limit)
	}
	e.lims.mu.Unlock()
	return g, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// releaseGrant gives g back unused, unless a report settled it.
func (e *execution) releaseGrant(g *limits.Grant) {
	if g == nil {
		return
	}
	e.lims.mu.Lock()
	for i, o := range e.lims.open {
		if o == g {
			e.lims.open = append(e.lims.open[:i], e.lims.open[i+1:]...)
			break
		}
	}
	e.lims.mu.Unlock()
	g.Release()
}

// settleLimits settles the oldest open grant with the tokens of a usage
// report: one report per call, so parallel calls each settle one grant.
// The report's AnsweredAtMs says whether the provider counted the call
// before a roll.
func (e *execution) settleLimits(u Usage) {
	e.lims.mu.Lock()
	var g *limits.Grant
	if len(e.lims.open) > 0 {
		g = e.lims.open[0]
		e.lims.open = e.lims.open[1:]
	}
	e.lims.mu.Unlock()
	if g != nil {
		var answered time.Time
		if u.AnsweredAtMs > 0 {
			answered = time.UnixMilli(u.AnsweredAtMs)
		}
		g.SettleAnswered(u.InputTokens+u.OutputTokens, answered)
	}
}

// releaseLimits releases the grants no report settled: the attempt ended.
func (e *execution) releaseLimits() {
	e.lims.mu.Lock()
	open := e.lims.open
	e.lims.open = nil
	e.lims.mu.Unlock()
	for _, g := range open {
		g.Release()
	}
}

// pauseLimits pauses, for d across the fleet, every limit the attempt
// reserved on: its handler asked to be retried after d (a provider's 429).
func (e *execution) pauseLimits(herr error, d time.Duration) {
	e.lims.mu.Lock()
	names := e.lims.names
	e.lims.mu.Unlock()
	if d <= 0 || len(names) == 0 {
		return
	}
	l, err := e.w.limiter(context.Background())
	if err != nil {
		return
	}
	ctx, cancel := writeContext()
	defer cancel()
	for _, name := range names {
		if err := l.Pause(ctx, name, d, herr.Error()); err != nil && !errors.Is(err, limits.ErrUnknownLimit) {
			e.log.WarnContext(ctx, "pause the provider limit", "limit", name, "err", err)
		}
	}
}
