package testsignal_test

import (
	"testing"

	"github.com/jetrun/jetrun/internal/engine/testsignal"
)

// A signal nobody initialised costs nothing and never blocks; an
// initialised one hands the test the values it waits for, in order.
func TestSignal(t *testing.T) {
	var off testsignal.Signal[int]
	for i := range 10_000 {
		off.Signal(i) // production: a no-op
	}
	var on testsignal.Signal[int]
	on.Init(t)
	for i := range 5 {
		on.Signal(i)
	}
	if got := on.Wait(); got != 0 {
		t.Fatalf("Wait = %d, want 0", got)
	}
	if got := on.WaitFor(func(v int) bool { return v > 2 }); got != 3 {
		t.Fatalf("WaitFor(> 2) = %d, want 3", got)
	}
	if got := on.Wait(); got != 4 {
		t.Fatalf("Wait after WaitFor = %d, want 4", got)
	}
}
