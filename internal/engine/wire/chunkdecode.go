package wire

import (
	"encoding/json"
	"strconv"

	"github.com/jetrun/jetrun/pkg/events"
)

// decodeChunk decodes a chunk event. Chunks are most of a chatty run's
// events, so a replay decodes the exact shape the worker writes
// ({"runId":…,"seq":…,"data":<string>[,"attempt":…]}) with a single scan,
// and anything else with encoding/json. Both give the same events.Chunk (see
// TestDecodeChunkMatchesEncodingJSON).
func decodeChunk(data []byte, c *events.Chunk) error { return decodeChunkOf(data, c, "") }

// decodeChunkOf is decodeChunk for an event of run runID: a chunk naming
// that run shares the runID string rather than copying it.
func decodeChunkOf(data []byte, c *events.Chunk, runID string) error {
	if decodeChunkFastOf(data, c, runID) {
		return nil
	}
	*c = events.Chunk{}
	return json.Unmarshal(data, c)
}

// decodeChunkFast decodes the worker's own shape of a chunk; false means
// "not that shape, decode it the general way" (c may be partly filled).
func decodeChunkFast(b []byte, c *events.Chunk) bool { return decodeChunkFastOf(b, c, "") }

// decodeChunkFastOf is decodeChunkFast sharing runID's string for a chunk
// of that run.
func decodeChunkFastOf(b []byte, c *events.Chunk, runID string) bool {
	i, ok := expect(b, 0, `{"runId":"`)
	if !ok {
		return false
	}
	start := i
	for i < len(b) && isIDByte(b[i]) {
		i++
	}
	if i == start || i-start > 64 || i >= len(b) || b[i] != '"' {
		return false
	}
	if id := b[start:i]; string(id) == runID {
		c.RunID = runID
	} else {
		c.RunID = string(id)
	}
	if i, ok = expect(b, i+1, `,"seq":`); !ok {
		return false
	}
	if c.Seq, i, ok = integer(b, i); !ok {
		return false
	}
	if i, ok = expect(b, i, `,"data":`); !ok {
		return false
	}
	start = i
	if i, ok = jsonString(b, i); !ok {
		return false
	}
	c.Data = json.RawMessage(b[start:i:i])
	c.Attempt = 0
	if j, ok := expect(b, i, `,"attempt":`); ok {
		n, k, ok := integer(b, j)
		if !ok || n < 0 || int64(int(n)) != n {
			return false
		}
		c.Attempt, i = int(n), k
	}
	return i == len(b)-1 && b[i] == '}'
}

func expect(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

func isIDByte(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-'
}

// integer reads a JSON integer (no fraction or exponent) fitting an int64.
func integer(b []byte, i int) (int64, int, bool) {
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == digits || i-digits > 18 || (b[digits] == '0' && i-digits > 1) {
		return 0, start, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, start, false
	}
	n, err := strconv.ParseInt(string(b[start:i]), 10, 64)
	return n, i, err == nil
}

// jsonString scans a valid JSON string starting at b[i] == '"' and returns
// the index just past its closing quote.
func jsonString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	for i++; i < len(b); i++ {
		switch ch := b[i]; {
		case ch == '"':
			return i + 1, true
		case ch < 0x20:
			return i, false
		case ch == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 {
					return i, false
				}
				for _, h := range b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		case ch >= 0x80:
			// Multi-byte UTF-8: encoding/json keeps a RawMessage's bytes as
			// they are, and so does this scan.
		}
	}
	return i, false
}
