// Package jsonenc appends JSON values to a byte slice exactly as
// encoding/json's Marshal writes them (HTML-safe strings, RFC 3339 times,
// compact raw messages), without reflection: the hand-written encoders of
// the messages every short run writes (a run's row, its status event) are
// built from it. A value these helpers do not write by hand is written by
// Marshal (Value), so an encoder stays exact for any input; each encoder is
// tested byte for byte against Marshal.
package jsonenc

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// String appends s as a JSON string, escaped as encoding/json escapes it:
// control characters, '"' and '\\', '<', '>' and '&' (HTML-safe), U+2028
// and U+2029, and invalid UTF-8 as U+FFFD.
func String(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Time appends t as time.Time's MarshalJSON writes it (RFC 3339 with
// nanoseconds), and reports false, appending nothing, for a time Marshal
// refuses (a year outside [0, 9999], an offset of a day or more).
func Time(dst []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return dst, false
	}
	if _, off := t.Zone(); off <= -24*60*60 || off >= 24*60*60 {
		return dst, false
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), true
}

// Int appends n.
func Int(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// Uint appends n.
func Uint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }

// Bool appends b.
func Bool(dst []byte, b bool) []byte { return strconv.AppendBool(dst, b) }

// Raw appends raw as Marshal writes a json.RawMessage: unchanged when it is
// valid, compact JSON with nothing to escape, else compacted and
// HTML-escaped by Marshal itself (which refuses it when it is not valid).
func Raw(dst []byte, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return append(dst, "null"...), nil
	}
	plain := true
	for _, b := range raw {
		switch b {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2: // 0xE2 leads U+2028 and U+2029
			plain = false
		}
	}
	if plain && json.Valid(raw) {
		return append(dst, raw...), nil
	}
	return Value(dst, raw)
}

// Value appends v as Marshal writes it: for the parts of a message that
// are not written by hand (nested objects, maps, lists).
func Value(dst []byte, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, data...), nil
}
