package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Chunk coalescing. A chatty run emits many small chunks (model tokens);
// each stored on its own is one message for the events stream's leader to
// store. The publisher coalesces adaptively, within a window:
//
//   - A quiet run's chunk leaves at once, as an event of its own: one
//     emitted when the run emitted no chunk within the window before it and
//     every event the attempt published is acknowledged (stored). A run that
//     emits now and then (a reply, then a tool call) gets each chunk to its
//     readers in one round trip, whatever the window.
//   - Otherwise (the run is streaming, or its last event is still on its
//     way) the chunk opens a batch, and the chunks after it join; the batch
//     is published as one chunk event carrying their range (events.Chunk:
//     Seq … Last, the data of Seq and More) when the window of its first
//     chunk ends, the batch is full, or any other event of the attempt is
//     published or flushed (so the timeline keeps its order).
//
// So a chunk waits at most the window, a steady stream is stored as about
// one event per window whatever its rate, and a fleet of them loads the
// server by the number of runs, not of chunks. The rule looks at
// the run's own emissions, not only at its acknowledgements: an
// acknowledgement says a chunk is stored, not that readers kept up, and a
// fleet of 50-chunk/s streams whose acknowledgements come back within the
// 20 ms between chunks would otherwise store one event per chunk, as with
// coalescing off, and its live readers fall seconds behind (make bench,
// token_streams_breakdown_off: stored in milliseconds, delivered seconds
// later).
//
// Re-sends. A batch, once closed, is an outgoing event like any other: its
// body and its Nats-Msg-Id (wire.ChunkRangeMsgID, deterministic for its
// range) are fixed, and a fault re-sends exactly that grouping, which the
// stream deduplicates; a range is never stored twice or with a gap. A new
// attempt carries on after the last chunk stored (loadHistory reads the
// range's end), and fencing keeps an older attempt from storing any more.

// Bounds of one coalesced chunk event, well within a NATS message (1 MiB by
// default) even with a chunk of events.MaxChunkBytes in it.
const (
	maxBatchBytes  = 256 << 10
	maxBatchChunks = 1000
)

// chunkBatch is a publisher's open batch of chunks (guarded by its mu).
type chunkBatch struct {
	window time.Duration   // 0 or less: every chunk leaves as an event of its own
	open   *events.Chunk   // the chunks emitted within the window, not yet published
	bytes  int             // their data's size
	ctx    context.Context // the context of the chunk that opened the batch, for the timer's publish
	timer  *time.Timer     // closes the batch when its window ends
	gen    uint64          // counts the batches opened, so a stale timer does nothing
	last   time.Time       // when the attempt's previous chunk was emitted
}

// chunk publishes c, the attempt's next chunk: as an event of its own when
// the publisher does not coalesce or the run is quiet, else into the open
// batch. It returns once c is in the batch or in flight; a failure shows on
// a later call.
func (p *publisher) chunk(ctx context.Context, c events.Chunk) error {
	if p.chunks.window <= 0 {
		_, err := p.publish(ctx, events.KindChunk, wire.ChunkMsgID(c.RunID, c.Seq), c, false)
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failed(); err != nil {
		return err
	}
	// The attempt's first chunk waits for its "running" (see open), as
	// any event does, and then finds the run quiet.
	if err := p.settleOpeningLocked(ctx); err != nil {
		return err
	}
	b := &p.chunks
	now := time.Now()
	quiet := b.open == nil && now.Sub(b.last) >= b.window && p.acknowledgedLocked()
	b.last = now
	if quiet {
		data, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("worker: encode chunk %d of run %s: %w", c.Seq, p.runID, err)
		}
		_, err = p.enqueueLocked(ctx, &outgoing{kind: events.KindChunk, msgID: wire.ChunkMsgID(c.RunID, c.Seq), data: data}, false)
		return err
	}
	if o := b.open; o != nil && (c.Seq != o.LastSeq()+1 || c.Attempt != o.Attempt ||
		b.bytes+len(c.Data) > maxBatchBytes || len(o.More)+1 >= maxBatchChunks) {
		if err := p.closeChunksLocked(ctx); err != nil {
			return err
		}
	}
	if b.open == nil {
		b.open, b.bytes, b.ctx = &c, len(c.Data), ctx
		b.gen++
		gen := b.gen
		b.timer = time.AfterFunc(b.window, func() { p.timedChunks(gen) })
		return nil
	}
	b.open.More = append(b.open.More, c.Data)
	b.open.Last = c.Seq
	b.bytes += len(c.Data)
	return nil
}

// acknowledgedLocked reports whether every event the attempt published
// is acknowledged (see dropAcknowledgedLocked); it does not wait. p.mu must
// be held.
func (p *publisher) acknowledgedLocked() bool {
	p.dropAcknowledgedLocked()
	return len(p.inflight) == 0
}

// closeChunksLocked publishes the open batch, if any, as one chunk event;
// p.mu must be held.
func (p *publisher) closeChunksLocked(ctx context.Context) error {
	b := &p.chunks
	c := b.open
	if c == nil {
		return nil
	}
	b.open, b.bytes, b.ctx = nil, 0, nil
	b.timer.Stop()
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("worker: encode chunks %d-%d of run %s: %w", c.Seq, c.LastSeq(), p.runID, err)
	}
	o := &outgoing{kind: events.KindChunk, msgID: wire.ChunkRangeMsgID(c.RunID, c.Seq, c.LastSeq()), data: data}
	_, err = p.enqueueLocked(ctx, o, false)
	return err
}

// timedChunks closes batch gen when its window ended. A failure is kept by
// the publisher (a permanent one) or leaves the event queued for the next
// publish (a transient one), so it shows on a later call.
func (p *publisher) timedChunks(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.chunks.gen || p.failed() != nil {
		return
	}
	_ = p.closeChunksLocked(p.chunks.ctx)
}

// dropChunksLocked forgets the open batch of a fenced attempt; p.mu must be
// held.
func (p *publisher) dropChunksLocked() {
	b := &p.chunks
	if b.open != nil {
		b.timer.Stop()
	}
	b.open, b.bytes, b.ctx = nil, 0, nil
	b.gen++
}
