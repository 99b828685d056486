package service_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/service"
)

func TestStartsOnce(t *testing.T) {
	var l service.Lifecycle
	if err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := l.Begin(); !errors.Is(err, service.ErrStarted) {
		t.Fatalf("second Begin = %v", err)
	}
}

func TestShutdownBeforeStartStops(t *testing.T) {
	var l service.Lifecycle
	if err := l.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Stopped():
	default:
		t.Fatal("Stopped is open after Shutdown")
	}
	if err := l.Begin(); !errors.Is(err, service.ErrStarted) {
		t.Fatalf("Begin after Shutdown = %v", err)
	}
}

// The end of Start's context stops the service as Stop does: its drain runs
// once, with a context that has ended.
func TestTheEndOfItsContextStopsIt(t *testing.T) {
	var l service.Lifecycle
	ctx, cancel := context.WithCancel(context.Background())
	drained := make(chan error, 2)
	if err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	l.Running(ctx, func(ctx context.Context) error {
		drained <- ctx.Err()
		return nil
	})
	cancel()
	select {
	case <-l.Stopped():
	case <-time.After(10 * time.Second):
		t.Fatal("not stopped after its context ended")
	}
	if err := <-drained; err == nil {
		t.Fatal("Stop drained with a live context")
	}
	_ = l.Stop()
	if len(drained) != 0 {
		t.Fatal("drained twice")
	}
}

// Shutdown from many goroutines drains once, and each returns the drain's
// error once it is done.
func TestConcurrentShutdownsDrainOnce(t *testing.T) {
	var l service.Lifecycle
	if err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	release := make(chan struct{})
	boom := errors.New("boom")
	l.Running(context.Background(), func(context.Context) error {
		calls.Add(1)
		<-release
		return boom
	})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- l.Shutdown(context.Background()) })
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, boom) {
			t.Fatalf("Shutdown = %v, want the drain's error", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("drain ran %d times", n)
	}
}

// A service stopped while it was starting stops what it started.
func TestStopWhileStarting(t *testing.T) {
	var l service.Lifecycle
	if err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	_ = l.Stop()
	drained := false
	l.Running(context.Background(), func(context.Context) error { drained = true; return nil })
	if !drained {
		t.Fatal("what was started after Stop was not drained")
	}
}

// A second Stop after the service stopped reports how it went, not that its
// own (ended) context ended.
func TestStopTwice(t *testing.T) {
	var l service.Lifecycle
	if err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	l.Running(context.Background(), func(context.Context) error { return nil })
	for range 20 {
		if err := l.Stop(); err != nil {
			t.Fatalf("Stop = %v", err)
		}
	}
}
