package model_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/jetrun/jetrun/internal/engine/model"
)

// TestRowKeepsTheKVFormat decodes a stored row with every field set
// (testdata/row.json, written by the row type that was public before
// model.Row was the engine's own) and encodes it again: every stored field
// keeps its JSON name and form, so old rows decode and new rows are
// readable by old code (docs/protocol.md, "The runs bucket").
func TestRowKeepsTheKVFormat(t *testing.T) {
	want, err := os.ReadFile("testdata/row.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(want))
	dec.DisallowUnknownFields()
	var r model.Row
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("decode a stored row: %v", err)
	}
	got, err := json.MarshalIndent(&r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if got = append(got, '\n'); !bytes.Equal(got, want) {
		t.Fatalf("a stored row encodes differently:\n%s\nwant\n%s", got, want)
	}
}
