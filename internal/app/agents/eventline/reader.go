package eventline

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// ErrTooLong is returned by Reader.Next for a line longer than its limit.
var ErrTooLong = errors.New("line too long")

// Reader reads lines of at most a limit in bytes. A last line without a
// newline counts only when the stream ended cleanly (io.EOF): the partial
// line of a dropped connection is never taken for an event.
type Reader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

// NewReader returns a Reader of r whose lines are at most max bytes.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, min(64<<10, max)), max: max}
}

// Next returns the next line without its newline (valid until the next
// call), io.EOF at a clean end, ErrTooLong, or the read error.
func (r *Reader) Next() ([]byte, error) {
	r.buf = r.buf[:0]
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(r.buf)+len(frag) > r.max+1 { // +1: the newline
			return nil, ErrTooLong
		}
		r.buf = append(r.buf, frag...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(bytes.TrimSuffix(r.buf, []byte("\n")), []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(r.buf) > 0:
			return r.buf, nil // the next call returns io.EOF
		default:
			return nil, err
		}
	}
}
