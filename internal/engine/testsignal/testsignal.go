// Package testsignal lets a long-running service tell a test that a step
// happened, so the test waits on the signal instead of polling what the
// step changed (River's rivershared/testsignal is the model). A Signal is
// nil until a test calls Init: in production Signal costs a nil check.
//
// A Signal is initialised before the service starts (Init is not safe
// concurrently with Signal); after that Signal and Wait are safe from any
// goroutine. Signal never blocks: past the buffer's capacity values are
// dropped, so a test waits for a value it has not drained yet with WaitFor.
package testsignal

import "time"

// capacity is the buffer of an initialised Signal.
const capacity = 1024

// DefaultTimeout bounds a Wait.
const DefaultTimeout = 30 * time.Second

// TB is the part of testing.TB a Signal needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal carries values of T from a service to a test.
type Signal[T any] struct {
	ch chan T
	tb TB
}

// Init makes s carry values for the test tb.
func (s *Signal[T]) Init(tb TB) {
	s.ch, s.tb = make(chan T, capacity), tb
}

// Signal sends v to the test, if s is initialised; it never blocks.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default: // a test that drains nothing does not stall the service
	}
}

// Wait returns the next value, or fails the test after DefaultTimeout.
func (s *Signal[T]) Wait() T {
	s.tb.Helper()
	return s.WaitFor(func(T) bool { return true })
}

// WaitFor returns the next value for which ok is true, dropping the
// others, or fails the test after DefaultTimeout.
func (s *Signal[T]) WaitFor(ok func(T) bool) T {
	s.tb.Helper()
	deadline := time.NewTimer(DefaultTimeout)
	defer deadline.Stop()
	for {
		select {
		case v := <-s.ch:
			if ok(v) {
				return v
			}
		case <-deadline.C:
			var zero T
			s.tb.Fatalf("testsignal: no %T signalled within %s", zero, DefaultTimeout)
			return zero
		}
	}
}
