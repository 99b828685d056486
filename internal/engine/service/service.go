// Package service is the lifecycle jetrun's long-running services share
// (the finish Deliverer, the Reconciler, the Meter, the Worker, the
// CallServer), like River's startstop: the same verbs on each, written
// once.
//
//   - Start(ctx) starts the service once; a second Start fails with
//     ErrStarted. The service runs until Shutdown or Stop is called, or ctx
//     ends (then it stops as Stop does).
//   - Shutdown(ctx) stops it gracefully: it stops taking work and waits for
//     the work in flight until ctx ends, then cancels what is left.
//   - Stop() is Shutdown with no wait.
//   - Stopped() is closed once the service has stopped.
//
// Shutdown and Stop are idempotent and safe before Start, and safe to call
// from several goroutines: the first runs the service's drain, the others
// wait for it.
//
// StartAll and StopAll start and stop a list of services, as a program
// composing them does.
package service

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("already started")

// Grace is how long a service's Shutdown waits for the work it cancelled
// (when its ctx ended first) to return.
const Grace = 10 * time.Second

// Service is what StartAll and StopAll start and stop.
type Service interface {
	Start(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

// StartAll starts services in order. They run until StopAll (or their own
// Shutdown), not until ctx ends: ctx's values reach them, its cancellation
// does not, so that the program stops them in the order it chooses. If one
// fails to start, the ones started before it are stopped (StopAll, no wait)
// and its error is returned.
func StartAll(ctx context.Context, services ...Service) error {
	ctx = context.WithoutCancel(ctx)
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			_ = StopAll(ended, services[:i]...)
			return err
		}
	}
	return nil
}

// StopAll shuts services down in parallel, each with ctx, and returns
// their errors joined. To stop in stages, call it once per stage.
func StopAll(ctx context.Context, services ...Service) error {
	errs := make([]error, len(services))
	var wg sync.WaitGroup
	for i, s := range services {
		wg.Go(func() { errs[i] = s.Shutdown(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Within bounds s's Shutdown to d from the context it is given (0: no
// wait, as Stop).
func Within(d time.Duration, s Service) Service { return within{s, d} }

type within struct {
	Service
	d time.Duration
}

func (w within) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.Service.Shutdown(ctx)
}

// Funcs makes a Service of two functions, for what has no Lifecycle of its
// own (an http.Server, say). A nil function does nothing.
type Funcs struct {
	StartFunc    func(ctx context.Context) error
	ShutdownFunc func(ctx context.Context) error
}

// Start calls StartFunc.
func (f Funcs) Start(ctx context.Context) error {
	if f.StartFunc == nil {
		return nil
	}
	return f.StartFunc(ctx)
}

// Shutdown calls ShutdownFunc.
func (f Funcs) Shutdown(ctx context.Context) error {
	if f.ShutdownFunc == nil {
		return nil
	}
	return f.ShutdownFunc(ctx)
}

// Lifecycle is the state a service embeds: whether it started, how it
// stops, and the channel Stopped returns. The zero value is ready.
type Lifecycle struct {
	mu       sync.Mutex
	started  bool
	stopping bool
	drain    func(ctx context.Context) error
	unwatch  func() bool
	stopped  chan struct{}
	err      error
}

// Begin marks the service started, or fails with ErrStarted. A Start that
// fails after Begin leaves the service stopped once Shutdown or Stop is
// called (it has nothing to drain).
func (l *Lifecycle) Begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started || l.stopping {
		return ErrStarted
	}
	l.started = true
	return nil
}

// Running records drain, the service's graceful stop (it must return once
// the work in flight is done or its context ends, having cancelled what was
// left), and stops the service when ctx ends.
func (l *Lifecycle) Running(ctx context.Context, drain func(ctx context.Context) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping { // stopped while starting: stop what was started
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		_ = drain(ended)
		return
	}
	l.drain = drain
	l.unwatch = context.AfterFunc(ctx, func() { _ = l.Stop() })
}

// Shutdown runs the drain once (see the package doc) and reports its error.
// A later call waits for the first to end, or for ctx.
func (l *Lifecycle) Shutdown(ctx context.Context) error {
	l.mu.Lock()
	ch := l.stoppedLocked()
	if l.stopping {
		l.mu.Unlock()
		select { // done already: say how it went, even to an ended ctx (Stop)
		case <-ch:
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.err
		default:
		}
		select {
		case <-ch:
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.stopping = true
	drain, unwatch := l.drain, l.unwatch
	l.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	var err error
	if drain != nil {
		err = drain(ctx)
	}
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	close(ch)
	return err
}

// Stop is Shutdown with no wait: work in flight is cancelled at once.
func (l *Lifecycle) Stop() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return l.Shutdown(ctx)
}

// Stopped returns a channel closed once the service has stopped.
func (l *Lifecycle) Stopped() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stoppedLocked()
}

func (l *Lifecycle) stoppedLocked() chan struct{} {
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	return l.stopped
}
