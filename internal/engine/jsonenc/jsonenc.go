// Package jsonenc appends JSON values to a byte slice exactly as
// encoding/json's Marshal writes them (HTML-safe strings, RFC 3339 times,
// compact raw messages), without reflection: the hand-written encoders of
// the messages every short run writes (a run's row, its status event) are
// built from it, and the readers of the flat objects their fast paths
// decode (a run's row). A value these helpers do not write by hand is written by
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

// The readers below decode the flat objects of a fast path: each reads
// one value at the start of s, reports false for anything it does not
// read exactly as encoding/json's Unmarshal would (the caller then
// decodes the whole message with Unmarshal), and returns what follows.

// SkipSpace drops JSON whitespace from the start of s.
func SkipSpace(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	return s
}

// PlainString reads a JSON string that needs no unescaping: no
// backslash, no control character, valid UTF-8.
func PlainString(s []byte) (val, rest []byte, ok bool) {
	if len(s) == 0 || s[0] != '"' {
		return nil, s, false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			val = s[1:i]
			return val, s[i+1:], utf8.Valid(val)
		case c == '\\' || c < 0x20:
			return nil, s, false
		}
	}
	return nil, s, false
}

// ParseInt reads a JSON integer (no fraction, no exponent, no leading
// zero) that fits in bits.
func ParseInt(s []byte, bits int) (int64, []byte, bool) {
	n := 0
	if n < len(s) && s[n] == '-' {
		n++
	}
	digits := n
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == digits || (s[digits] == '0' && n > digits+1) || (n < len(s) && (s[n] == '.' || s[n] == 'e' || s[n] == 'E')) {
		return 0, s, false
	}
	v, err := strconv.ParseInt(string(s[:n]), 10, bits)
	return v, s[n:], err == nil
}

// ParseUint reads a JSON integer that is not negative, as ParseInt.
func ParseUint(s []byte) (uint64, []byte, bool) {
	if len(s) > 0 && s[0] == '-' {
		return 0, s, false
	}
	v, rest, ok := ParseInt(s, 64)
	if ok {
		return uint64(v), rest, true
	}
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 || (s[0] == '0' && n > 1) || (n < len(s) && (s[n] == '.' || s[n] == 'e' || s[n] == 'E')) {
		return 0, s, false
	}
	u, err := strconv.ParseUint(string(s[:n]), 10, 64)
	return u, s[n:], err == nil
}

// ParseBool reads true or false.
func ParseBool(s []byte) (bool, []byte, bool) {
	switch {
	case len(s) >= 4 && string(s[:4]) == "true":
		return true, s[4:], true
	case len(s) >= 5 && string(s[:5]) == "false":
		return false, s[5:], true
	}
	return false, s, false
}

// ValueEnd returns the length of the JSON value at the start of s, or 0
// when it cannot tell; it does not validate what it covers.
func ValueEnd(s []byte) int {
	if len(s) == 0 {
		return 0
	}
	switch s[0] {
	case '"':
		return stringEnd(s)
	case '{', '[':
		depth := 0
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case '"':
				n := stringEnd(s[i:])
				if n == 0 {
					return 0
				}
				i += n - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return 0
	}
	for i, c := range s {
		switch c {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return len(s)
}

// stringEnd returns the length of the JSON string at the start of s
// (quotes included), or 0 if it does not end.
func stringEnd(s []byte) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return 0
}

// ReadRaw reads a JSON value as Unmarshal reads it into a
// json.RawMessage: a copy of its bytes, once they are valid JSON.
func ReadRaw(s []byte) (json.RawMessage, []byte, bool) {
	n := ValueEnd(s)
	if n == 0 || !json.Valid(s[:n]) {
		return nil, s, false
	}
	return append(json.RawMessage(nil), s[:n]...), s[n:], true
}

// ReadTime reads a JSON string as time.Time's UnmarshalJSON reads it.
func ReadTime(s []byte, t *time.Time) ([]byte, bool) {
	_, rest, ok := PlainString(s)
	if !ok || t.UnmarshalJSON(s[:len(s)-len(rest)]) != nil {
		return s, false
	}
	return rest, true
}

// ReadValue reads a JSON value into v with Unmarshal: the nested parts of
// a flat object's fast path.
func ReadValue(s []byte, v any) ([]byte, bool) {
	n := ValueEnd(s)
	if n == 0 || json.Unmarshal(s[:n], v) != nil {
		return s, false
	}
	return s[n:], true
}

// Object reads the flat JSON object data, calling field for each key with
// the value's start; field returns what follows the value, or false to
// give up. Object reports false for anything else than such an object.
func Object(data []byte, field func(key, s []byte) ([]byte, bool)) bool {
	s := SkipSpace(data)
	if len(s) == 0 || s[0] != '{' {
		return false
	}
	s = SkipSpace(s[1:])
	if len(s) > 0 && s[0] == '}' {
		return len(SkipSpace(s[1:])) == 0
	}
	for {
		key, rest, ok := PlainString(s)
		if !ok {
			return false
		}
		if s = SkipSpace(rest); len(s) == 0 || s[0] != ':' {
			return false
		}
		if s, ok = field(key, SkipSpace(s[1:])); !ok {
			return false
		}
		if s = SkipSpace(s); len(s) == 0 {
			return false
		}
		switch s[0] {
		case ',':
			s = SkipSpace(s[1:])
			continue
		case '}':
			return len(SkipSpace(s[1:])) == 0
		}
		return false
	}
}
