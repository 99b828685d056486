package wire_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/jsonenc/jsonenctest"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// TestStatusEventIsEncodedAsMarshalEncodesIt fills every field (a field
// added to events.StatusEvent and not to the encoder fails here).
func TestStatusEventIsEncodedAsMarshalEncodesIt(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var ev events.StatusEvent
		jsonenctest.Fill(r, &ev, i%10 != 0)
		want, werr := json.Marshal(&ev)
		got, err := wire.EncodeStatusEvent(&ev)
		if (err != nil) != (werr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("event %+v:\nencoded %s (%v)\nMarshal %s (%v)", ev, got, err, want, werr)
		}
	}
}

// BenchmarkStatusEvent compares the encoder with json.Marshal on a short
// run's final status event.
func BenchmarkStatusEvent(b *testing.B) {
	ev := events.StatusEvent{RunID: "plain-1234", Status: events.StatusCompleted, Attempt: 1,
		At: time.Now(), AgentType: "noop", StartedAt: time.Now()}
	b.Run("encoder", func(b *testing.B) {
		for b.Loop() {
			_, _ = wire.EncodeStatusEvent(&ev)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(&ev)
		}
	})
}
