package execagent

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// outputTail keeps the longest tail that fits the limit once encoded,
// whatever the text: escapes of 2 and 6 bytes, multi-byte runes, invalid
// UTF-8.
func TestOutputTailIsTheLongestThatFitsEncoded(t *testing.T) {
	t.Parallel()
	texts := map[string]string{
		"plain":    strings.Repeat("token 1 ", 5000),
		"quotes":   strings.Repeat(`{"chunk": "token 1 "}`+"\n", 2000),
		"html":     strings.Repeat("<a href=x>&</a>", 1000),
		"control":  strings.Repeat("\x01\x02\t", 3000),
		"runes":    strings.Repeat("héllo wörld — ✓ \u2028", 1000),
		"invalid":  strings.Repeat("ok\xff\xfe", 3000),
		"short":    "fits as it is",
		"emptyish": "",
	}
	for name, s := range texts {
		for _, limit := range []int{2, 3, 7, 100, 4096, 1 << 20} {
			b := outputTail(s, limit)
			if len(b) > limit && len(b) > 2 {
				t.Fatalf("%s, limit %d: %d bytes", name, limit, len(b))
			}
			var got string
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%s, limit %d: %s: %v", name, limit, b, err)
			}
			start := len(s) - len(got)
			if utf8.ValidString(s) && !strings.HasSuffix(s, got) {
				t.Fatalf("%s, limit %d: %q is not a tail", name, limit, got)
			}
			if start > 0 && utf8.ValidString(s) {
				// One more rune would not fit.
				_, size := utf8.DecodeLastRuneInString(s[:start])
				if more, _ := json.Marshal(s[start-size:]); len(more) <= limit {
					t.Fatalf("%s, limit %d: kept %d bytes; %d more fit", name, limit, len(got), size)
				}
			}
		}
	}
}
