package runstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

// Reads of a row are direct gets, which any replica of a replicated bucket
// answers. A replica that is behind — a node restarted a moment ago and
// still catching up — answers "not found" for a row that exists
// (nats-server #4710). A row that a direct get did not find is therefore
// looked up again on the stream's leader before Get says it does not exist;
// on a single-replica bucket there is nobody else to ask.

// jsErrCodeMessageNotFound is the leader's "no such message".
const jsErrCodeMessageNotFound = 10037

// leaderReadTimeout bounds one read from a stream's leader. A stream
// without a leader (an election, quorum lost) answers nothing, not even "no
// responders": without a bound a read would wait for as long as the
// caller's context, forever for a context without a deadline.
const leaderReadTimeout = 5 * time.Second

// leaderLast reads the last message on subject of stream from the stream's
// leader. It returns (nil, nil) when there is none, or when the last one is
// a delete or purge marker.
func leaderLast(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := leaderLastRaw(ctx, nc, stream, subject)
	if err != nil || m == nil || isMarker(m.Header) {
		return nil, err
	}
	return m, nil
}

// isMarker reports whether a bucket message with header h removes its key:
// a delete or purge, or a marker the server left when the key's TTL or the
// bucket's max age ran out.
func isMarker(h nats.Header) bool {
	if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}

// leaderLastRaw is leaderLast returning a marker as it is.
func leaderLastRaw(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": subject})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, leaderReadTimeout)
	defer cancel()
	reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("read %s from the leader of %s: %w", subject, stream, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("read %s from the leader of %s: %w", subject, stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == jsErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("read %s from the leader of %s: %s (%d)", subject, stream, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, fmt.Errorf("read %s from the leader of %s: %w", subject, stream, jetstream.ErrInvalidJetStreamResponse)
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Data: resp.Message.Data}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("read %s from the leader of %s: %w", subject, stream, err)
		}
	}
	return m, nil
}

// leaderRow reads the message of run id's row from the runs bucket's
// leader (see leaderLast).
func (s *Store) leaderRow(ctx context.Context, id string) (*jetstream.RawStreamMsg, error) {
	return leaderLast(ctx, s.js.Conn(), wire.BucketStream(s.kv.Bucket()), wire.BucketSubject(s.kv.Bucket(), id))
}

// createOver answers a create refused because the key of run id has a
// message. It reads that message from the bucket's leader: a row means
// ErrRunExists; the marker a cleared row left behind is replaced by the
// new row, as jetstream.KeyValue.Create does. Nothing there happens when a
// clustered leader refused the create while an earlier one of the same key
// was still in process — typically the caller's own try that timed out in
// a leader election — and that one was lost with its leader: the create is
// retried (jsfault.ErrWriteInFlight is transient).
func (s *Store) createOver(ctx context.Context, id string, data []byte) (uint64, error) {
	m, err := leaderLastRaw(ctx, s.js.Conn(), wire.BucketStream(s.kv.Bucket()), wire.BucketSubject(s.kv.Bucket(), id))
	switch {
	case err != nil:
		return 0, fmt.Errorf("kv: create run %s: read what its key holds: %w", id, err)
	case m == nil:
		return 0, fmt.Errorf("kv: create run %s: %w", id, jsfault.ErrWriteInFlight)
	case !isMarker(m.Header):
		return 0, fmt.Errorf("kv: create run %s: %w", id, ErrRunExists)
	}
	rev, err := s.write(ctx, id, data, m.Sequence)
	if wire.IsWrongLastSequence(err) {
		return 0, fmt.Errorf("kv: create run %s: %w", id, ErrRunExists) // another create replaced the marker first
	}
	if err != nil {
		return 0, fmt.Errorf("kv: create run %s: %w", id, err)
	}
	return rev, nil
}

// confirmMissing asks the leader of the runs bucket for the row a direct
// get did not find. It returns the row, or ErrRunNotFound.
func (s *Store) confirmMissing(ctx context.Context, id string) (*model.Row, uint64, error) {
	if s.replicas <= 1 {
		return nil, 0, fmt.Errorf("kv: get run %s: %w", id, ErrRunNotFound)
	}
	m, err := s.leaderRow(ctx, id)
	if err != nil {
		return nil, 0, fmt.Errorf("kv: get run %s: %w", id, err)
	}
	if m == nil {
		return nil, 0, fmt.Errorf("kv: get run %s: %w", id, ErrRunNotFound)
	}
	r, err := Decode(id, m.Data)
	if err != nil {
		return nil, 0, err
	}
	return r, m.Sequence, nil
}

// Latest returns the row of run id as its newest write left it: read from
// the runs bucket's leader (a replica may be behind), or, on a
// single-replica bucket, as Get does. ErrRunNotFound if it has none.
func (s *Store) Latest(ctx context.Context, id string) (*model.Row, uint64, error) {
	if s.replicas <= 1 {
		return s.Get(ctx, id)
	}
	return s.confirmMissing(ctx, id)
}
