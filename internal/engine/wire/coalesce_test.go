package wire

import (
	"encoding/json"
	"testing"

	"github.com/jetrun/jetrun/pkg/events"
)

// A coalesced chunk event, as the worker writes it, decodes to its range and
// splits into one events.Event per chunk in the single-chunk shape; a single chunk
// stays one events.Event.
func TestCoalescedChunkSplits(t *testing.T) {
	body := []byte(`{"runId":"r1","seq":7,"data":"a","attempt":2,"last":9,"more":[{"n":1},"c"]}`)
	ev := events.Event{Seq: 57, RunID: "r1", Kind: events.KindChunk, Attempt: 2, Data: body}
	if err := decodeEvent(&ev); err != nil {
		t.Fatal(err)
	}
	if ev.Chunk.Seq != 7 || ev.Chunk.LastSeq() != 9 || len(ev.Chunk.More) != 2 {
		t.Fatalf("decoded %+v", ev.Chunk)
	}
	want := []string{
		`{"runId":"r1","seq":7,"data":"a","attempt":2}`,
		`{"runId":"r1","seq":8,"data":{"n":1},"attempt":2}`,
		`{"runId":"r1","seq":9,"data":"c","attempt":2}`,
	}
	pieces := ev.Split()
	if len(pieces) != len(want) {
		t.Fatalf("%d pieces", len(pieces))
	}
	for i, p := range pieces {
		if string(p.Data) != want[i] || p.Seq != 57 || p.Part != i || p.Parts != 3 || p.Chunk.Seq != int64(7+i) || p.LastPart() != (i == 2) {
			t.Errorf("piece %d: %s seq %d part %d/%d chunk %+v", i, p.Data, p.Seq, p.Part, p.Parts, p.Chunk)
		}
		var again events.Chunk
		if decodeChunk(p.Data, &again) != nil || again.Last != 0 || again.More != nil || again.Seq != p.Chunk.Seq || string(again.Data) != string(p.Chunk.Data) {
			t.Errorf("piece %d does not decode as a single chunk: %+v", i, again)
		}
	}

	single := events.Event{Seq: 58, RunID: "r1", Kind: events.KindChunk, Data: json.RawMessage(`{"runId":"r1","seq":10,"data":"d"}`)}
	if err := decodeEvent(&single); err != nil {
		t.Fatal(err)
	}
	if s := single.Split(); len(s) != 1 || s[0].Parts != 0 || !s[0].LastPart() || string(s[0].Data) != string(single.Data) {
		t.Fatalf("a single chunk split into %+v", s)
	}
	if id := ChunkRangeMsgID("r1", 7, 9); id != "r1.c.7-9" {
		t.Fatalf("range id %q", id)
	}
	if id := ChunkRangeMsgID("r1", 7, 7); id != ChunkMsgID("r1", 7) {
		t.Fatalf("one-chunk range id %q", id)
	}
}
