package jsonenc_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/jsonenc"
)

func TestStringIsWrittenAsMarshalWritesIt(t *testing.T) {
	var all strings.Builder
	for b := range 256 {
		all.WriteByte(byte(b))
	}
	cases := []string{"", "plain", `q"uote\back`, "<a href='x'>&amp;</a>", "line\nbreak\ttab\r\b\f\x00\x1f\x7f",
		"h\u00e9llo \u2028 \u2029 \U0001F600", "bad \xff\xfe utf8 \xe2\x80", all.String(), "\xe2\x80\xa8"}
	for _, s := range cases {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonenc.String(nil, s); !bytes.Equal(got, want) {
			t.Errorf("String(%q) = %s, Marshal writes %s", s, got, want)
		}
	}
}

func FuzzString(f *testing.F) {
	f.Add("a<b>&\u2028\xff")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := jsonenc.String(nil, s); !bytes.Equal(got, want) {
			t.Errorf("String(%q) = %s, Marshal writes %s", s, got, want)
		}
	})
}

func TestTimeIsWrittenAsMarshalWritesIt(t *testing.T) {
	zone := time.FixedZone("x", 5*3600+30*60)
	for _, tm := range []time.Time{{}, time.Now(), time.Now().UTC(), time.Date(2026, 1, 2, 3, 4, 5, 0, zone),
		time.Date(2026, 1, 2, 3, 4, 5, 120_000_000, time.UTC)} {
		want, err := json.Marshal(tm)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := jsonenc.Time(nil, tm)
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("Time(%v) = %s %t, Marshal writes %s", tm, got, ok, want)
		}
	}
	for _, tm := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := json.Marshal(tm); err == nil {
			t.Fatalf("Marshal(%v) wrote it", tm)
		}
		if got, ok := jsonenc.Time(nil, tm); ok || len(got) != 0 {
			t.Errorf("Time(%v) = %s %t, Marshal refuses it", tm, got, ok)
		}
	}
}

func TestRawIsWrittenAsMarshalWritesIt(t *testing.T) {
	for _, raw := range []string{`1`, `{"a":[1,2,{"b":"c"}]}`, ` { "a" : 1 } `, `"<b>&"`, "\"\u2028\"", `null`} {
		want, err := json.Marshal(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		got, err := jsonenc.Raw(nil, json.RawMessage(raw))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Raw(%q) = %s %v, Marshal writes %s", raw, got, err, want)
		}
	}
	if _, err := jsonenc.Raw(nil, json.RawMessage(`{"a":`)); err == nil {
		t.Error("Raw wrote invalid JSON")
	}
}
