package wire

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

	"github.com/jetrun/jetrun/pkg/events"
)

// replayBatch is how many messages a replay's consumer asks for at a time:
// twice nats.go's default, as a replay mostly reads stored history, which
// fewer, bigger pulls read faster.
const replayBatch = 1000

// Replay yields a run's stored events in order, then (per opts.Follow)
// follows the live stream. One ordered consumer, filtered to the run's
// subjects, serves history and live alike, so the hand-over between them
// can neither lose nor repeat an event; a replay never reads other runs'
// events. When ctx ends the sequence yields one last error wrapping
// events.ErrReplayStopped.
func Replay(ctx context.Context, js jetstream.JetStream, ns Namespace, runID string, opts events.ReplayOptions) iter.Seq2[events.Event, error] {
	return func(yield func(events.Event, error) bool) {
		if err := events.ValidateID(runID); err != nil {
			yield(events.Event{}, fmt.Errorf("events: replay: %w", err))
			return
		}
		kinds := opts.Kinds
		filters := []string{ns.RunWildcard(runID)}
		if len(kinds) > 0 {
			filters = filters[:0]
			for _, k := range kinds {
				filters = append(filters, ns.RunSubject(runID, k))
			}
			if opts.Follow == events.UntilEnd && !slices.Contains(kinds, events.KindStatus) {
				filters = append(filters, ns.RunSubject(runID, events.KindStatus)) // to know when it ends
			}
		}
		name, err := RunEventsStream(ctx, js, ns, runID)
		if err != nil {
			yield(events.Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
			return
		}
		var last uint64
		switch opts.Follow {
		case events.UntilEnd:
			// Resuming after the run's end: nothing will ever come.
			ended, err := endedBy(ctx, js, ns, name, runID, opts.After)
			if err != nil {
				yield(events.Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
				return
			}
			if ended {
				return
			}
		case events.HistoryOnly:
			stream, err := js.Stream(ctx, name)
			if err != nil {
				yield(events.Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
				return
			}
			for _, f := range filters {
				m, err := stream.GetLastMsgForSubject(ctx, f)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				}
				if err != nil {
					yield(events.Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
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
		c, err := js.OrderedConsumer(ctx, name, cfg)
		if err != nil {
			yield(events.Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
			return
		}
		defer forget(ctx, js, name, c)
		it, err := c.Messages(jetstream.PullMaxMessages(replayBatch))
		if err != nil {
			yield(events.Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
			return
		}
		defer it.Stop()
		dec := newEventDecoder(ns, runID)
		next := jetstream.NextContext(ctx)
		for {
			msg, err := it.Next(next)
			if err != nil {
				if ctx.Err() != nil {
					yield(events.Event{}, fmt.Errorf("events: replay %s: %w: %w", runID, events.ErrReplayStopped, ctx.Err()))
				} else {
					yield(events.Event{}, fmt.Errorf("events: replay %s: %w", runID, err))
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
			case opts.Follow == events.HistoryOnly && seq >= last:
				return
			case opts.Follow == events.UntilEnd && err == nil && ev.Ends():
				return
			}
		}
	}
}

// FollowInactive is the inactive threshold of a process's long-lived
// ordered consumers (a parent's status follower, a worker's signal and
// cancel followers): one that stopped, or whose process died, goes a
// minute later instead of nats.go's five, so restarts under faults do not
// pile consumers up against the stream's limit (see forget).
const FollowInactive = time.Minute

// forgetTimeout bounds the delete of a replay's consumer.
const forgetTimeout = 2 * time.Second

// forget deletes a replay's ordered consumer once the replay is done.
// Stopping an ordered consumer leaves it on the server until its inactive
// threshold (5 minutes), and a stream holds 1,000 consumers by default:
// some three replays a second (a parent following each child's chunks, a
// UI per open run) would fill it, and every replay after would fail with
// "maximum consumers limit reached". Bounded, and done even when ctx
// ended (the caller left): a consumer the delete misses still goes at its
// inactive threshold.
func forget(ctx context.Context, js jetstream.JetStream, stream string, c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil || info.Name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetTimeout)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream, info.Name)
}

// endedBy reports whether the run's newest status event ends it and lies at
// or before sequence after.
func endedBy(ctx context.Context, js jetstream.JetStream, ns Namespace, stream string, runID string, after uint64) (bool, error) {
	if after == 0 {
		return false, nil
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return false, err
	}
	m, err := s.GetLastMsgForSubject(ctx, ns.RunSubject(runID, events.KindStatus))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var st events.StatusEvent
	if json.Unmarshal(m.Data, &st) != nil {
		return false, nil
	}
	ev := events.Event{Status: &st}
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

// decode turns a stored message into an events.Event; seq is the message's stream
// sequence (0 if unknown), set even when err is not nil.
func (d eventDecoder) decode(msg jetstream.Msg) (ev events.Event, seq uint64, err error) {
	seq, stamp, pending, ok := ackFields(msg.Reply())
	if !ok {
		meta, err := msg.Metadata()
		if err != nil {
			return events.Event{}, 0, err
		}
		seq, stamp, pending = meta.Sequence.Stream, meta.Timestamp, meta.NumPending
	}
	runID, kind, err := d.parseSubject(msg.Subject())
	if err != nil {
		return events.Event{}, seq, err
	}
	ev = events.Event{
		Seq: seq, Time: stamp, RunID: runID, Kind: kind,
		Pending: pending, Data: json.RawMessage(msg.Data()),
	}
	ev.Attempt = attemptHeader(msg.Headers())
	return ev, seq, decodeEvent(&ev)
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
	v := h.Get(events.HeaderAttempt)
	if v == "" {
		return 0 // no attempt (strconv.Atoi would fail and say 0)
	}
	n, _ := strconv.Atoi(v)
	return n
}

// decode fills the typed field of e's kind from e.Data.
func decodeEvent(e *events.Event) error {
	var target any
	switch e.Kind {
	case events.KindStatus:
		e.Status = new(events.StatusEvent)
		target = e.Status
	case events.KindChunk:
		e.Chunk = new(events.Chunk)
		return decodeChunkOf(e.Data, e.Chunk, e.RunID)
	case events.KindProgress:
		e.Progress = new(events.Progress)
		target = e.Progress
	case events.KindMilestone:
		e.Milestone = new(events.Milestone)
		target = e.Milestone
	case events.KindSignal:
		e.Signal = new(events.SignalEvent)
		target = e.Signal
	case events.KindChildChunk:
		e.ChildChunk = new(events.ChildChunk)
		target = e.ChildChunk
	case events.KindCall:
		e.Call = new(events.Call)
		target = e.Call
	case events.KindReply:
		e.Reply = new(events.Reply)
		target = e.Reply
	case events.KindStep:
		e.Step = new(events.Step)
		target = e.Step
	default:
		return nil // an unknown kind is passed through with its raw data
	}
	return json.Unmarshal(e.Data, target)
}
