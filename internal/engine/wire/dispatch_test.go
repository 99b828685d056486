package wire_test

import (
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestDebounceWindow(t *testing.T) {
	t.Parallel()
	if d := wire.Debounce(&events.Dispatch{}); d != 750*time.Millisecond {
		t.Fatalf("default window %s", d)
	}
	if d := wire.Debounce(&events.Dispatch{DebounceMs: 40}); d != 40*time.Millisecond {
		t.Fatalf("window %s", d)
	}
	if wire.OrQueue("") != events.StrategyQueue {
		t.Fatal("an empty strategy is not queue")
	}
}
