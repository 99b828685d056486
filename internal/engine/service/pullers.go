package service

import (
	"context"
	"sync"

	"github.com/jetrun/jetrun/internal/engine/pull"
)

// Pullers owns a service's fetch loops and the handlers they start: the
// contexts they run under, and their two-phase drain. Every consumer
// service (the finish Deliverer, the Meter, the Worker, the CallServer)
// runs its loops through one.
type Pullers struct {
	run      context.Context // handlers' context, ended by the forced phase of Drain
	cancel   context.CancelCauseFunc
	cause    error           // what the handlers' context ends with (nil: context.Canceled)
	forced   func()          // called by the forced phase of Drain before it ends them
	pull     context.Context // fetch loops' context, ended first by Drain
	stopPull context.CancelFunc
	loops    sync.WaitGroup
	handlers sync.WaitGroup
}

// NewPullers returns Pullers whose contexts keep ctx's values but not its
// cancellation: the service's Lifecycle decides when they end.
func NewPullers(ctx context.Context) *Pullers {
	p := &Pullers{}
	p.run, p.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	p.pull, p.stopPull = context.WithCancel(p.run)
	return p
}

// OnForce sets how Drain ends the handlers that outlive its ctx: it calls
// forced (nil: nothing; a log line, say), then ends their context with
// cause (nil: context.Canceled), the cause the context also ends with once
// Drain returns. Call it before Drain.
func (p *Pullers) OnForce(cause error, forced func()) { p.cause, p.forced = cause, forced }

// Context is the context handlers run under: it ends when Drain gives up
// waiting for them.
func (p *Pullers) Context() context.Context { return p.run }

// Go runs l until Drain, its handlers under Context, counting them.
func (p *Pullers) Go(l pull.Loop) {
	l.Handlers, l.HandlerContext = &p.handlers, p.run
	p.loops.Go(func() { l.Run(p.pull) })
}

// Drain stops fetching, waits for the loops, then for the handlers until ctx
// ends; then it cancels them and waits at most Grace more. It reports
// whether every handler returned.
func (p *Pullers) Drain(ctx context.Context) bool {
	defer p.cancel(p.cause)
	return pull.Drain(ctx, p.stopPull, &p.loops, &p.handlers, func() {
		if p.forced != nil {
			p.forced()
		}
		p.cancel(p.cause)
	}, Grace)
}
