package service

import (
	"context"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/pull"
)

// Pullers owns a service's fetch loops and the handlers they start: the
// contexts they run under, and their two-phase drain. Every consumer
// service (the finish Deliverer, the Meter) runs its loops through one.
type Pullers struct {
	run      context.Context // handlers' context, ended by the forced phase of Drain
	cancel   context.CancelFunc
	pull     context.Context // fetch loops' context, ended first by Drain
	stopPull context.CancelFunc
	loops    sync.WaitGroup
	handlers sync.WaitGroup
}

// NewPullers returns Pullers whose contexts keep ctx's values but not its
// cancellation: the service's Lifecycle decides when they end.
func NewPullers(ctx context.Context) *Pullers {
	p := &Pullers{}
	p.run, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.pull, p.stopPull = context.WithCancel(p.run)
	return p
}

// Context is the context handlers run under: it ends when Drain gives up
// waiting for them.
func (p *Pullers) Context() context.Context { return p.run }

// Go runs l until Drain, counting its handlers.
func (p *Pullers) Go(l pull.Loop) {
	l.Handlers = &p.handlers
	p.loops.Go(func() { l.Run(p.pull) })
}

// Drain stops fetching, waits for the loops, then for the handlers until ctx
// ends; then it cancels them and waits at most grace more. It reports
// whether every handler returned.
func (p *Pullers) Drain(ctx context.Context, grace time.Duration) bool {
	defer p.cancel()
	return pull.Drain(ctx, p.stopPull, &p.loops, &p.handlers, p.cancel, grace)
}
