package model_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/jsonenc/jsonenctest"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// rowSeeds are stored rows as the encoder writes them, every field set at
// random (some left zero), and a few written by hand.
func rowSeeds(n int) [][]byte {
	r := rand.New(rand.NewPCG(5, 6))
	var out [][]byte
	for i := range n {
		var row model.Row
		jsonenctest.Fill(r, &row, i%4 != 0)
		if data, err := model.EncodeRow(&row); err == nil {
			out = append(out, data)
		}
	}
	for _, s := range []string{`{"id":"r1","agentType":"a","status":"starting","createdAt":"2026-01-02T03:04:05Z","unindexed":true}`,
		`{"ID":"r1"}`, `{"id":"r\u00e91"}`, `{"id":null}`, `{"attempt":1.0}`, `{"blinks":[1,2],"blinks":[3]}`,
		`{"signalsSeen":{"a":1},"signalsSeen":{"b":2}}`, `{"createdAt":"not a time"}`, `{"input":{"a":}}`} {
		out = append(out, []byte(s))
	}
	return out
}

// FuzzDecodeRowFast: whatever the fast path decodes, json.Unmarshal
// decodes the same, and accepts.
func FuzzDecodeRowFast(f *testing.F) {
	for _, s := range rowSeeds(40) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFastRow(t, data) })
}

func TestDecodeRowFastDecodesAsUnmarshal(t *testing.T) {
	t.Parallel()
	fast, seeds := 0, rowSeeds(2000)
	for _, s := range seeds {
		if checkFastRow(t, s) {
			fast++
		}
	}
	// Rows with escaped strings go to Unmarshal; a short run's do not.
	typical := []byte(`{"id":"r1","agentType":"a","input":{"n":1},"status":"completed","attempt":1,"dispatchSeq":7,` +
		`"createdAt":"2026-01-02T03:04:05.123456789Z","startedAt":"2026-01-02T03:04:05+01:00","unindexed":true}`)
	if !checkFastRow(t, typical) || fast < len(seeds)/10 {
		t.Errorf("the fast path decoded %d of %d rows, and not a short run's", fast, len(seeds))
	}
}

func checkFastRow(t *testing.T, data []byte) bool {
	t.Helper()
	var got model.Row
	if !model.DecodeRowFast(data, &got) {
		return false
	}
	var want model.Row
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("%s: the fast path decoded it, json.Unmarshal refuses it: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: the fast path decoded\n%+v\njson.Unmarshal\n%+v", data, got, want)
	}
	return true
}

func BenchmarkDecodeRow(b *testing.B) {
	now := time.Now()
	row := model.Row{ID: "bulk-1234", AgentType: "noop", Input: json.RawMessage(`1`), Status: events.StatusStarting,
		DispatchSeq: 12345, CreatedAt: now, Unindexed: true}
	data, _ := model.EncodeRow(&row)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			var r model.Row
			model.DecodeRowFast(data, &r)
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		for b.Loop() {
			var r model.Row
			_ = json.Unmarshal(data, &r)
		}
	})
}
