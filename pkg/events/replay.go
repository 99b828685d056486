package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// replayBatch is how many messages a replay's consumer asks for at a time:
// twice nats.go's default, as a replay mostly reads stored history, which
// fewer, bigger pulls read faster.
const replayBatch = 1000

// ErrReplayStopped is the error a replay yields when its context ends.
var ErrReplayStopped = errors.New("replay stopped")

// Replay yields a run's stored events in order, then (per opts.Follow)
// follows the live stream. One ordered consumer, filtered to the run's
// subjects, serves history and live alike, so the hand-over between them
// can neither lose nor repeat an event; a replay never reads other runs'
// events. When ctx ends the sequence yields one last error wrapping
// ErrReplayStopped.
func Replay(ctx context.Context, js jetstream.JetStream, ns Namespace, runID string, opts ReplayOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if err := ValidateID(runID); err != nil {
			yield(Event{}, fmt.Errorf("events: replay: %w", err))
			return
		}
		kinds := opts.Kinds
		filters := []string{ns.RunWildcard(runID)}
		if len(kinds) > 0 {
			filters = filters[:0]
			for _, k := range kinds {
				filters = append(filters, ns.RunSubject(runID, k))
			}
			if opts.Follow == UntilEnd && !slices.Contains(kinds, KindStatus) {
				filters = append(filters, ns.RunSubject(runID, KindStatus)) // to know when it ends
			}
		}
		var last uint64
		switch opts.Follow {
		case UntilEnd:
			// Resuming after the run's end: nothing will ever come.
			ended, err := endedBy(ctx, js, ns, runID, opts.After)
			if err != nil {
				yield(Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
				return
			}
			if ended {
				return
			}
		case HistoryOnly:
			stream, err := js.Stream(ctx, ns.EventsStream())
			if err != nil {
				yield(Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
				return
			}
			for _, f := range filters {
				m, err := stream.GetLastMsgForSubject(ctx, f)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				}
				if err != nil {
					yield(Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
					return
				}
				last = max(last, m.Sequence)
			}
			if last == 0 || last <= opts.After || last < opts.StartSeq {
				return // nothing stored where the replay would start
			}
		}
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters}
		switch start := max(opts.After+1, opts.StartSeq); {
		case opts.After > 0 || opts.StartSeq > 0:
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
		case !opts.StartTime.IsZero():
			from := opts.StartTime
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
		}
		c, err := js.OrderedConsumer(ctx, ns.EventsStream(), cfg)
		if err != nil {
			yield(Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
			return
		}
		it, err := c.Messages(jetstream.PullMaxMessages(replayBatch))
		if err != nil {
			yield(Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
			return
		}
		defer it.Stop()
		dec := newEventDecoder(ns, runID)
		next := jetstream.NextContext(ctx)
		for {
			msg, err := it.Next(next)
			if err != nil {
				if ctx.Err() != nil {
					yield(Event{}, fmt.Errorf("events: replay %s: %w: %w", runID, ErrReplayStopped, ctx.Err()))
				} else {
					yield(Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
				}
				return
			}
			ev, seq, err := dec.decode(msg)
			if err == nil && (len(kinds) == 0 || slices.Contains(kinds, ev.Kind)) {
				for _, piece := range ev.Split() {
					if !yield(piece, nil) {
						return
					}
				}
			} // else a foreign or malformed message on the run's subjects: skipped
			switch {
			case opts.Follow == HistoryOnly && seq >= last:
				return
			case opts.Follow == UntilEnd && err == nil && ev.Ends():
				return
			}
		}
	}
}

// endedBy reports whether the run's newest status event ends it and lies at
// or before sequence after.
func endedBy(ctx context.Context, js jetstream.JetStream, ns Namespace, runID string, after uint64) (bool, error) {
	if after == 0 {
		return false, nil
	}
	stream, err := js.Stream(ctx, ns.EventsStream())
	if err != nil {
		return false, err
	}
	m, err := stream.GetLastMsgForSubject(ctx, ns.RunSubject(runID, KindStatus))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var st StatusEvent
	if json.Unmarshal(m.Data, &st) != nil {
		return false, nil
	}
	ev := Event{Status: &st}
	return m.Sequence <= after && ev.Ends(), nil
}

// eventDecoder turns the stored messages of one run into Events.
type eventDecoder struct {
	ns    Namespace
	runID string
	// prefix is the subject prefix of the run's events,
	// "<prefix>.run.<runID>.": a subject with it needs no general parse.
	prefix string
}

func newEventDecoder(ns Namespace, runID string) eventDecoder {
	return eventDecoder{ns: ns, runID: runID, prefix: ns.Prefix() + ".run." + runID + "."}
}

// decode turns a stored message into an Event; seq is the message's stream
// sequence (0 if unknown), set even when err is not nil.
func (d eventDecoder) decode(msg jetstream.Msg) (ev Event, seq uint64, err error) {
	seq, stamp, pending, ok := ackFields(msg.Reply())
	if !ok {
		meta, err := msg.Metadata()
		if err != nil {
			return Event{}, 0, err
		}
		seq, stamp, pending = meta.Sequence.Stream, meta.Timestamp, meta.NumPending
	}
	runID, kind, err := d.parseSubject(msg.Subject())
	if err != nil {
		return Event{}, seq, err
	}
	ev = Event{
		Seq: seq, Time: stamp, RunID: runID, Kind: kind,
		Pending: pending, Data: json.RawMessage(msg.Data()),
	}
	ev.Attempt = attemptHeader(msg.Headers())
	return ev, seq, ev.decode()
}

// ackFields reads a delivered message's stream sequence, timestamp and
// pending count from its ack subject, reply, as msg.Metadata() does
// (nats.go's parser: "$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.
// <ts>.<pending>", or with a domain and account hash before the stream and
// any tokens after the pending count) but without building the whole
// metadata. false means "not that shape": ask msg.Metadata(), which says
// why. (Metadata also refuses a message not bound to a subscription; a
// consumer's messages always are.)
func ackFields(reply string) (seq uint64, stamp time.Time, pending uint64, ok bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return 0, time.Time{}, 0, false
	}
	skip := 0 // tokens before the stream's
	switch n := strings.Count(reply, ".") + 1; {
	case n == 9:
	case n >= 11:
		skip = 2
	default:
		return 0, time.Time{}, 0, false
	}
	for i := 0; ; i++ {
		var tok string
		tok, rest, _ = strings.Cut(rest, ".")
		switch i - skip {
		case 3:
			seq = ackNum(tok)
		case 5:
			stamp = time.Unix(0, int64(ackNum(tok)))
		case 6:
			return seq, stamp, ackNum(tok), true
		}
	}
}

// ackNum is nats.go's parser.ParseNum: the decimal number d, 0 if d is not
// one.
func ackNum(d string) (n uint64) {
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return 0
		}
		n = n*10 + uint64(d[i]-'0')
	}
	return n
}

// parseSubject is ns.ParseRunSubject, without the general parse for a
// subject of the decoder's run.
func (d eventDecoder) parseSubject(subject string) (runID, kind string, err error) {
	if kind, ok := strings.CutPrefix(subject, d.prefix); ok && kind != "" {
		return d.runID, kind, nil
	}
	return d.ns.ParseRunSubject(subject)
}

func attemptHeader(h nats.Header) int {
	v := h.Get(HeaderAttempt)
	if v == "" {
		return 0 // no attempt (strconv.Atoi would fail and say 0)
	}
	n, _ := strconv.Atoi(v)
	return n
}

// decode fills the typed field of e's kind from e.Data.
func (e *Event) decode() error {
	var target any
	switch e.Kind {
	case KindStatus:
		e.Status = new(StatusEvent)
		target = e.Status
	case KindChunk:
		e.Chunk = new(Chunk)
		return decodeChunkOf(e.Data, e.Chunk, e.RunID)
	case KindProgress:
		e.Progress = new(Progress)
		target = e.Progress
	case KindMilestone:
		e.Milestone = new(Milestone)
		target = e.Milestone
	case KindSignal:
		e.Signal = new(SignalEvent)
		target = e.Signal
	case KindChildChunk:
		e.ChildChunk = new(ChildChunk)
		target = e.ChildChunk
	case KindCall:
		e.Call = new(Call)
		target = e.Call
	case KindReply:
		e.Reply = new(Reply)
		target = e.Reply
	case KindStep:
		e.Step = new(Step)
		target = e.Step
	default:
		return nil // an unknown kind is passed through with its raw data
	}
	return json.Unmarshal(e.Data, target)
}
