package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Pipelined reads and writes: each sends its request at once and returns a
// function that waits for the answer, so a caller with many rows to read
// or create (parent.Client.DispatchMany) puts them all on the connection
// before it waits for any, instead of one round trip after another. Every
// returned function must be called once.

// LookupLater sends Lookup's read of run id's row; the returned function
// waits for it and answers as Lookup does.
func (s *Store) LookupLater(id string) func(context.Context) (*model.Row, uint64, error) {
	if err := events.ValidateID(id); err != nil {
		return func(context.Context) (*model.Row, uint64, error) {
			return nil, 0, fmt.Errorf("kv: get run: %w", err)
		}
	}
	if !s.direct {
		return func(ctx context.Context) (*model.Row, uint64, error) { return s.Lookup(ctx, id) }
	}
	q := s.pub.Send(s.readMsg(id))
	return func(ctx context.Context) (*model.Row, uint64, error) {
		data, rev, err := readAnswer(q.Wait(ctx))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, fmt.Errorf("kv: get run %s: %w", id, ErrRunNotFound)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("kv: get run %s: %w", id, err)
		}
		r, err := Decode(id, data)
		if err != nil {
			return nil, 0, err
		}
		return r, rev, nil
	}
}

// CreateLater sends Create's write of r, a row that is not indexed
// (r.Unindexed); the returned function waits for it and answers as Create
// does (a key holding a deletion marker is created over, then, one round
// trip after another).
func (s *Store) CreateLater(r *model.Row) func(context.Context) (uint64, error) {
	fail := func(err error) func(context.Context) (uint64, error) {
		return func(context.Context) (uint64, error) { return 0, err }
	}
	if !r.Unindexed {
		return fail(fmt.Errorf("kv: create run %s: a pipelined create is for unindexed rows", r.ID))
	}
	if err := events.ValidateID(r.ID); err != nil {
		return fail(fmt.Errorf("kv: create run: %w", err))
	}
	data, err := model.EncodeRow(r)
	if err != nil {
		return fail(fmt.Errorf("kv: encode run %s: %w", r.ID, err))
	}
	m := &nats.Msg{Subject: wire.BucketSubject(s.kv.Bucket(), r.ID), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(0, 10))
	q := s.pub.Send(m)
	return func(ctx context.Context) (uint64, error) {
		ack, err := q.Ack(ctx)
		if wire.IsWrongLastSequence(err) {
			return s.createOver(ctx, r.ID, data)
		}
		if err != nil {
			return 0, fmt.Errorf("kv: create run %s: %w", r.ID, err)
		}
		return ack.Sequence, nil
	}
}

// Looked is a row LookupMany found, at revision Rev.
type Looked struct {
	Row *model.Row
	Rev uint64
}

// maxLookupMany is the most rows one batched direct get answers
// (nats-server's bound on a multi_last request).
const maxLookupMany = 1024

// LookupMany reads the rows of ids (at most 1,024) with one batched direct
// get (nats-server 2.11 and later) instead of a read each: found holds the
// rows that exist, and an id absent from it has no row, unconfirmed, as
// Lookup's ErrRunNotFound. An error (a server without batched gets, an
// answer cut short, a row that does not decode, a user not allowed the
// request) says nothing of any id: the caller reads them one by one. After
// such a failure LookupMany does not try for a minute, so a server or a
// user without batched reads costs at most one wait (of up to two seconds)
// a minute.
func (s *Store) LookupMany(ctx context.Context, ids []string) (map[string]Looked, error) {
	if !s.direct || time.Now().UnixNano() < s.noBatchReadUntil.Load() || len(ids) == 0 || len(ids) > maxLookupMany {
		return nil, errors.New("kv: no batched read for these rows")
	}
	for _, id := range ids {
		if err := events.ValidateID(id); err != nil {
			return nil, fmt.Errorf("kv: get runs: %w", err)
		}
	}
	callerCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, min(s.js.Options().DefaultTimeout, maxBatchReadWait))
	defer cancel()
	found, err := s.lookupMany(ctx, ids)
	if err != nil && callerCtx.Err() == nil && !errors.Is(err, ErrCorruptRow) && !errors.Is(err, errCutShort) {
		// Read one by one for a while (a server that does not know batched
		// reads answers a bad request; one that drops them, nothing).
		s.noBatchReadUntil.Store(time.Now().Add(batchReadPause).UnixNano())
	}
	return found, err
}

// maxBatchReadWait bounds how long LookupMany waits for an answer (a server
// answers one in milliseconds); after a failure batched reads pause for
// batchReadPause.
const (
	maxBatchReadWait = 2 * time.Second
	batchReadPause   = time.Minute
)

// maxBatchReadBytes bounds a batched read's answer: past it (large rows)
// the server stops, and the caller reads the rows one by one.
const maxBatchReadBytes = 8 << 20

// errCutShort is a batched read whose answer stopped before its end: at
// maxBatchReadBytes, or slower than the wait after its first rows came (a
// loaded server). The server knows batched reads: they do not pause.
var errCutShort = errors.New("kv: get runs: the answer was cut short")

func (s *Store) lookupMany(ctx context.Context, ids []string) (map[string]Looked, error) {
	bucket := s.kv.Bucket()
	ofSubject := make(map[string]string, len(ids))
	req := struct {
		MultiLast []string `json:"multi_last"`
		MaxBytes  int      `json:"max_bytes"`
	}{MultiLast: make([]string, 0, len(ids)), MaxBytes: maxBatchReadBytes}
	for _, id := range ids {
		subj := wire.BucketSubject(bucket, id)
		ofSubject[subj] = id
		req.MultiLast = append(req.MultiLast, subj)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("kv: get runs: %w", err)
	}
	nc := s.js.Conn()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("kv: get runs: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+wire.BucketStream(bucket), inbox, data); err != nil {
		return nil, fmt.Errorf("kv: get runs: %w", err)
	}
	found := make(map[string]Looked)
	answered := false
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil && answered {
			return nil, fmt.Errorf("%w: %w", errCutShort, err)
		}
		if err != nil {
			return nil, fmt.Errorf("kv: get runs: %w", err)
		}
		answered = true
		if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
			switch {
			case status == "404": // none of them has a message
				return found, nil
			case status == "204" && m.Header.Get(numPendingHeader) == "0":
				return found, nil // the end of the batch
			case status == "204":
				return nil, fmt.Errorf("%w at its size bound", errCutShort)
			}
			return nil, fmt.Errorf("kv: get runs: direct get answered %s %s (pending %q)", status,
				m.Header.Get("Description"), m.Header.Get(numPendingHeader))
		}
		id, ok := ofSubject[m.Header.Get(jetstream.SubjectHeader)]
		if !ok {
			return nil, fmt.Errorf("kv: get runs: an answer for subject %q", m.Header.Get(jetstream.SubjectHeader))
		}
		if isMarker(m.Header) {
			continue
		}
		rev, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("kv: get runs: bad %s header: %w", jetstream.SequenceHeader, err)
		}
		row, err := Decode(id, m.Data)
		if err != nil {
			return nil, err
		}
		found[id] = Looked{Row: row, Rev: rev}
	}
}

// numPendingHeader says, on a batched direct get's end, how many messages
// it left out.
const numPendingHeader = "Nats-Num-Pending"
