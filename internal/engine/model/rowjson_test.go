package model_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/jsonenc/jsonenctest"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// TestRowIsEncodedAsMarshalEncodesIt fills every field of rows at random
// (a field added to model.Row and not to EncodeRow fails here).
func TestRowIsEncodedAsMarshalEncodesIt(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		var row model.Row
		jsonenctest.Fill(r, &row, i%10 != 0)
		want, werr := json.Marshal(&row)
		got, err := model.EncodeRow(&row)
		if (err != nil) != (werr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("row %+v:\nencoded %s (%v)\nMarshal %s (%v)", row, got, err, want, werr)
		}
	}
	bad := model.Row{ID: "r", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := model.EncodeRow(&bad); err == nil {
		t.Error("a row Marshal refuses was encoded")
	}
}

// BenchmarkRow compares the encoder with json.Marshal on a short run's
// final row.
func BenchmarkRow(b *testing.B) {
	now := time.Now()
	row := model.Row{ID: "plain-1234", AgentType: "noop", Input: json.RawMessage(`1`), Status: events.StatusCompleted,
		Attempt: 1, DispatchSeq: 12345, CreatedAt: now, StartedAt: now, FinishedAt: now, Unindexed: true}
	b.Run("encoder", func(b *testing.B) {
		for b.Loop() {
			_, _ = model.EncodeRow(&row)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(&row)
		}
	})
}
