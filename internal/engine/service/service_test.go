package service_test

import (
	"context"
	"errors"
	"slices"
	"strings"
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

// A service that fails to start stops the ones started before it; the
// ones after it are not started.
func TestStartAllStopsTheStartedOnError(t *testing.T) {
	var log []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	svc := func(name string, fail bool) service.Service {
		return service.Funcs{
			StartFunc: func(ctx context.Context) error {
				note("start " + name)
				if fail {
					return errors.New(name + " failed")
				}
				return nil
			},
			ShutdownFunc: func(ctx context.Context) error {
				if ctx.Err() == nil {
					t.Errorf("%s stopped with a live context", name)
				}
				note("stop " + name)
				return nil
			},
		}
	}
	err := service.StartAll(context.Background(), svc("a", false), svc("b", false), svc("c", true), svc("d", false))
	if err == nil || err.Error() != "c failed" {
		t.Fatalf("StartAll = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(log[:3], ",") + "|" + strings.Join(slices.Sorted(slices.Values(log[3:])), ",")
	if want := "start a,start b,start c|stop a,stop b"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// StartAll's context does not stop the services when it ends; StopAll
// stops them in parallel and joins their errors; Within bounds a wait.
func TestStopAll(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var a, b service.Lifecycle
	both := make(chan struct{})
	var arrived atomic.Int32
	start := func(l *service.Lifecycle, err error) service.Service {
		return service.Funcs{
			StartFunc: func(ctx context.Context) error {
				if err := l.Begin(); err != nil {
					return err
				}
				l.Running(ctx, func(ctx context.Context) error {
					if arrived.Add(1) == 2 {
						close(both)
					}
					select { // each waits for the other: they stop in parallel
					case <-both:
					case <-time.After(10 * time.Second):
						return errors.New("stopped alone")
					}
					<-ctx.Done()
					return err
				})
				return nil
			},
			ShutdownFunc: l.Shutdown,
		}
	}
	boom := errors.New("boom")
	svcs := []service.Service{service.Within(50*time.Millisecond, start(&a, boom)), service.Within(0, start(&b, nil))}
	if err := service.StartAll(ctx, svcs...); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-a.Stopped():
		t.Fatal("the end of StartAll's context stopped a service")
	case <-time.After(50 * time.Millisecond):
	}
	if err := service.StopAll(context.Background(), svcs...); !errors.Is(err, boom) {
		t.Fatalf("StopAll = %v, want boom", err)
	}
}
