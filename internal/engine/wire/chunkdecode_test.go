package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/pkg/events"
)

// The single-scan chunk decoder agrees with encoding/json on every input:
// the same events.Chunk, or an error from both.
func TestDecodeChunkMatchesEncodingJSON(t *testing.T) {
	cases := []string{
		`{"runId":"r1","seq":1,"data":"hello"}`,
		`{"runId":"r1","seq":2,"data":"line\nwith \"quotes\" \\ and \u00e9 and /"}`,
		`{"runId":"r-1_x","seq":123456789,"data":"","attempt":3}`,
		`{"runId":"r1","seq":1,"data":"é ünïcode 🙂"}`,
		`{"runId":"r1","seq":1,"data":{"a":1}}`,
		`{"runId":"r1","seq":1,"data":[1,2]}`,
		`{"runId":"r1","seq":1,"data":12}`,
		`{"runId":"r1","seq":1,"data":null}`,
		`{"runId":"r1","seq":1.5,"data":"x"}`,
		`{"runId":"r1","seq":1e3,"data":"x"}`,
		`{"runId":"r1","seq":01,"data":"x"}`,
		`{"runId":"r1","seq":-4,"data":"x"}`,
		`{"runId":"r1","seq":99999999999999999999,"data":"x"}`,
		`{"runId":"r1","seq":1,"data":"bad \x escape"}`,
		`{"runId":"r1","seq":1,"data":"bad \u12 escape"}`,
		"{\"runId\":\"r1\",\"seq\":1,\"data\":\"control \x01 char\"}",
		`{"runId":"r1","seq":1,"data":"unterminated}`,
		`{"runId":"r1","seq":1,"data":"x","attempt":-1}`,
		`{"runId":"r1","seq":1,"data":"x","attempt":2.5}`,
		`{"runId":"r1","seq":1,"data":"x","other":1}`,
		`{"runId":"r1","seq":1,"data":"x"} `,
		`{"runId":"r1","seq":1,"data":"x"}}`,
		`{"seq":1,"runId":"r1","data":"x"}`,
		`{"runId":"r.1","seq":1,"data":"x"}`,
		`{"runId":"","seq":1,"data":"x"}`,
		`{"runId":"r1","seq":1,"data":"x","attempt":1,"attempt":2}`,
		`{"RunId":"r1","seq":1,"data":"x"}`,
		`not json`,
		``,
		`{"runId":"` + strings.Repeat("a", 70) + `","seq":1,"data":"x"}`,
	}
	for _, in := range cases {
		var want events.Chunk
		wantErr := json.Unmarshal([]byte(in), &want)
		var got events.Chunk
		gotErr := decodeChunk([]byte(in), &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("%s: error %v, encoding/json %v", in, gotErr, wantErr)
			continue
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, encoding/json %+v", in, got, want)
		}
		// Decoding for a run, that chunk's own or another, changes nothing.
		for _, runID := range []string{want.RunID, "r1", "other"} {
			var of events.Chunk
			if err := decodeChunkOf([]byte(in), &of, runID); (err == nil) != (gotErr == nil) || !reflect.DeepEqual(of, got) {
				t.Errorf("%s for run %q: got %+v (%v), decodeChunk %+v (%v)", in, runID, of, err, got, gotErr)
			}
		}
	}
	// What the worker writes takes the fast path.
	for _, c := range []events.Chunk{{RunID: "r", Seq: 7, Data: json.RawMessage(`"a\nb"`)}, {RunID: "r", Seq: 1, Data: json.RawMessage(`"x"`), Attempt: 2}} {
		b, _ := json.Marshal(c)
		var got events.Chunk
		if !decodeChunkFast(b, &got) || !reflect.DeepEqual(got, c) {
			t.Errorf("%s: fast path %+v", b, got)
		}
	}
}

func BenchmarkDecodeChunk(b *testing.B) {
	data, _ := json.Marshal(events.Chunk{RunID: "chatty-1", Seq: 12345, Data: json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)})
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			var c events.Chunk
			_ = decodeChunk(data, &c)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var c events.Chunk
			_ = json.Unmarshal(data, &c)
		}
	})
}
