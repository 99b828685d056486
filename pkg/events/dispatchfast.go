package events

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodeDispatchFast decodes the dispatches almost every run has without
// reflection: a flat object whose keys are the exact names of Dispatch's
// strings, numbers and input, with strings that need no unescaping. It
// reports false for anything else (another key, a key in other case, an
// escape, a null, a nested budget…), which json.Unmarshal then decodes:
// what it returns with true is what json.Unmarshal returns
// (FuzzDecodeDispatchFast). Decoding every dispatch with json.Unmarshal
// was about a tenth of a short run's CPU in the worker.
func decodeDispatchFast(data []byte) (d Dispatch, ok bool) {
	s := skipSpace(data)
	if len(s) == 0 || s[0] != '{' {
		return d, false
	}
	s = skipSpace(s[1:])
	if len(s) > 0 && s[0] == '}' {
		return d, len(skipSpace(s[1:])) == 0
	}
	for {
		key, rest, ok := plainString(s)
		if !ok {
			return d, false
		}
		if s = skipSpace(rest); len(s) == 0 || s[0] != ':' {
			return d, false
		}
		if s, ok = d.field(string(key), skipSpace(s[1:])); !ok {
			return d, false
		}
		if s = skipSpace(s); len(s) == 0 {
			return d, false
		}
		switch s[0] {
		case ',':
			s = skipSpace(s[1:])
			continue
		case '}':
			return d, len(skipSpace(s[1:])) == 0
		}
		return d, false
	}
}

// field decodes the value at the start of s into d's field key, and
// returns what follows it.
func (d *Dispatch) field(key string, s []byte) ([]byte, bool) {
	var str *string
	switch key {
	case "input":
		n := valueEnd(s)
		if n == 0 || !json.Valid(s[:n]) {
			return s, false
		}
		d.Input = append(json.RawMessage(nil), s[:n]...)
		return s[n:], true
	case "displayOrder", "depth", "debounceMs":
		n := 0
		if n < len(s) && s[n] == '-' {
			n++
		}
		digits := n
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		if n == digits || (s[digits] == '0' && n > digits+1) || (n < len(s) && (s[n] == '.' || s[n] == 'e' || s[n] == 'E')) {
			return s, false
		}
		bits := 64
		if key != "debounceMs" {
			bits = strconv.IntSize
		}
		v, err := strconv.ParseInt(string(s[:n]), 10, bits)
		if err != nil {
			return s, false
		}
		switch key {
		case "displayOrder":
			d.DisplayOrder = int(v)
		case "depth":
			d.Depth = int(v)
		default:
			d.DebounceMs = v
		}
		return s[n:], true
	case "runId":
		str = &d.RunID
	case "parent":
		str = &d.Parent
	case "parentToolCallId":
		str = &d.ParentToolCallID
	case "concurrencyKey":
		str = &d.ConcurrencyKey
	case "traceparent":
		str = &d.TraceParent
	case "tracestate":
		str = &d.TraceState
	case "root":
		str = &d.Root
	case "session":
		str = &d.Session
	case "tenant":
		str = &d.Tenant
	case "strategy":
		v, rest, ok := plainString(s)
		if ok {
			d.Strategy = Strategy(v)
		}
		return rest, ok
	default:
		return s, false
	}
	v, rest, ok := plainString(s)
	if ok {
		*str = string(v)
	}
	return rest, ok
}

// plainString reads the JSON string at the start of s when it needs no
// unescaping: no backslash, no control character, valid UTF-8.
func plainString(s []byte) (val, rest []byte, ok bool) {
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

// valueEnd returns the length of the JSON value at the start of s, or 0
// when it cannot tell (the caller validates what it covers).
func valueEnd(s []byte) int {
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

func skipSpace(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	return s
}
