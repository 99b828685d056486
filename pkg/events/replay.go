package events

import (
	"encoding/json"
	"errors"
	"time"
)

// Event is one stored event of a run, as Replay yields it.
type Event struct {
	// Seq is the event's sequence in the events stream: its identity.
	// Resuming a replay after a Seq yields no gap and no duplicate. The
	// chunks of one coalesced chunk event share its Seq (see Part): a reader
	// that stopped at one of them but the last (!LastPart) resumes after
	// Seq-1 and skips the chunks it has (Chunk.Seq, 1, 2, 3… per run, says
	// which).
	Seq uint64 `json:"seq"`
	// Time is when the server stored the event.
	Time  time.Time `json:"time"`
	RunID string    `json:"runId"`
	Kind  string    `json:"kind"`
	// Attempt is the attempt that published the event (0 when not a
	// worker).
	Attempt int `json:"attempt,omitempty"`
	// Pending is how many matching events were stored after this one when
	// it was delivered: 0 means the replay caught up with the live stream.
	Pending uint64 `json:"pending"`
	// Part and Parts place a chunk within a coalesced chunk event (one
	// stored event carrying several chunks, see Chunk): Replay yields each
	// of its chunks as an Event of its own with the stored event's Seq,
	// Part 0, 1 … Parts-1, and Data the chunk alone in the single-chunk
	// shape. Both are 0 for an event carrying one chunk.
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
	// Data is the event's body; exactly one of the typed fields below is
	// set for a known kind.
	Data      json.RawMessage `json:"data"`
	Status    *StatusEvent    `json:"-"`
	Chunk     *Chunk          `json:"-"`
	Progress  *Progress       `json:"-"`
	Milestone *Milestone      `json:"-"`
	Signal    *SignalEvent    `json:"-"`
	// ChildChunk, Call and Reply: nested runs and calls (nested.go).
	ChildChunk *ChildChunk `json:"-"`
	Call       *Call       `json:"-"`
	Reply      *Reply      `json:"-"`
	// Step: a durable step (step.go).
	Step *Step `json:"-"`
}

// LastPart reports whether e is the last (or only) chunk of its stored
// event: resuming after its Seq skips nothing.
func (e Event) LastPart() bool { return e.Part >= e.Parts-1 }

// Split returns the events e stands for: one per chunk of a coalesced
// chunk event (see Part), else e itself.
func (e Event) Split() []Event {
	if e.Chunk == nil || len(e.Chunk.More) == 0 {
		return []Event{e}
	}
	pieces := e.Chunk.Pieces()
	out := make([]Event, len(pieces))
	for i := range pieces {
		c := &pieces[i]
		data, err := json.Marshal(c)
		if err != nil {
			data = nil // a RawMessage that decoded encodes again; never here
		}
		out[i] = e
		out[i].Chunk, out[i].Data, out[i].Part, out[i].Parts = c, data, i, len(pieces)
	}
	return out
}

// Ends reports whether a replay that follows the run until it ends stops
// after e: a final status, or a give-up whose child has stopped.
func (e Event) Ends() bool {
	if e.Status == nil {
		return false
	}
	return e.Status.Status.Final() || (e.Status.Status == StatusInterrupted && !e.Status.ChildStillRunning)
}

// Follow says how long a replay goes on after the stored history.
type Follow int

const (
	// UntilEnd follows the live stream until the run ends (a final
	// status, or a give-up whose child stopped). The default.
	UntilEnd Follow = iota
	// Forever follows the live stream until the context ends.
	Forever
	// HistoryOnly stops at the last event stored when the replay began.
	HistoryOnly
)

// ReplayOptions tunes Replay.
type ReplayOptions struct {
	// After resumes after this stream sequence, the last Seq the caller
	// saw; 0 starts at the run's beginning.
	After uint64
	// StartSeq and StartTime say where the run's events begin in the
	// stream (its row's firstEventSeq and createdAt), so a replay of one run
	// never scans the whole stream. With neither, the replay starts at the
	// stream's first message.
	StartSeq  uint64
	StartTime time.Time
	// Kinds restricts the replay to these kinds (default: all).
	Kinds []string
	// Follow is how long to go on after the history.
	Follow Follow
}

// ErrReplayStopped is the error a replay yields when its context ends.
var ErrReplayStopped = errors.New("replay stopped")
