package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// Run events may be spread over N streams (docs/operations.md, Spreading
// events over nodes). With N = 1, the default, JETRUN_EVENTS captures
// jetrun.run.> as it always did. With N > 1, stream p (JETRUN_EVENTS for
// p = 0, JETRUN_EVENTS_<p> after) captures the ingest subjects
// jetrun.runp.<p>.<id>.<kind>, stores each message under the documented
// subject jetrun.run.<id>.<kind> (a stream subject transform) and
// republishes it there once stored, so stored subjects, consumer filters,
// fences and core subscribers keep the documented names. A run's partition
// is the server's own partition(N, 1) mapping function, FNV-1a of the run
// id modulo N, so an operator's account mapping
//
//	jetrun.run.*.* -> jetrun.runp.{{partition(N,1)}}.{{wildcard(1)}}.{{wildcard(2)}}
//
// sends what outside writers publish on the documented subjects to the
// same stream jetrun's own writers do.

// MetaEventsStreams is the stream metadata key holding N on every events
// stream jetrun created with N > 1.
const MetaEventsStreams = "jetrun.events.streams"

// Partition returns the events partition of run id among n streams: the
// value of the server mapping function partition(n, 1) for the id token.
func Partition(runID string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(runID))
	return int(h.Sum32() % uint32(n))
}

// EventsStreamOf is the name of events stream p: JETRUN_EVENTS for 0,
// JETRUN_EVENTS_<p> after.
func (ns Namespace) EventsStreamOf(p int) string {
	if p == 0 {
		return ns.EventsStream()
	}
	return ns.streamName("EVENTS_" + strconv.Itoa(p))
}

// EventsStreamFor is the name of the stream holding run id's events among n.
func (ns Namespace) EventsStreamFor(runID string, n int) string {
	return ns.EventsStreamOf(Partition(runID, n))
}

// EventsStreams lists the names of n events streams, partition order.
func (ns Namespace) EventsStreams(n int) []string {
	names := make([]string, max(n, 1))
	for p := range names {
		names[p] = ns.EventsStreamOf(p)
	}
	return names
}

// IngestWildcard is what events stream p captures when there are several:
// jetrun.runp.<p>.>.
func (ns Namespace) IngestWildcard(p int) string {
	return ns.prefix() + ".runp." + strconv.Itoa(p) + ".>"
}

// EventSubject is the subject a writer publishes event kind of run id on
// among n events streams: RunSubject for n = 1, the ingest subject
// jetrun.runp.<p>.<id>.<kind> otherwise. It is stored, and seen by
// subscribers, as RunSubject(runID, kind).
func (ns Namespace) EventSubject(runID, kind string, n int) string {
	if n <= 1 {
		return ns.RunSubject(runID, kind)
	}
	return ns.prefix() + ".runp." + strconv.Itoa(Partition(runID, n)) + "." + ns.RunSubject(runID, kind)[len(ns.prefix())+len(".run."):]
}

// EventsMapping returns the account subject mapping an operator adds to the
// server configuration so that writers outside jetrun may keep publishing on
// jetrun.run.<id>.<kind> with n events streams.
func (ns Namespace) EventsMapping(n int) (from, to string) {
	return ns.prefix() + ".run.*.*",
		ns.prefix() + ".runp.{{partition(" + strconv.Itoa(n) + ",1)}}.{{wildcard(1)}}.{{wildcard(2)}}"
}

// eventsConfigs returns the configurations of n events streams.
func eventsConfigs(ns Namespace, o events.StreamOptions) []jetstream.StreamConfig {
	base := jetstream.StreamConfig{
		Name:        ns.EventsStream(),
		Description: "jetrun run events: status, chunks, progress and milestones, kept for replay",
		Subjects:    []string{ns.RunsWildcard()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
		MaxAge:      o.EventsMaxAge,
		Duplicates:  min(o.EventsDedupWindow, o.EventsMaxAge),
		AllowDirect: true,
	}
	n := max(o.EventsStreams, 1)
	if n == 1 {
		return []jetstream.StreamConfig{base}
	}
	cfgs := make([]jetstream.StreamConfig, n)
	for p := range cfgs {
		c := base
		c.Name = ns.EventsStreamOf(p)
		c.Description = fmt.Sprintf("jetrun run events, partition %d of %d: status, chunks, progress and milestones "+
			"of the runs whose id hashes to %d, kept for replay", p, n, p)
		c.Subjects = []string{ns.IngestWildcard(p)}
		c.SubjectTransform = &jetstream.SubjectTransformConfig{Source: ns.IngestWildcard(p), Destination: ns.RunsWildcard()}
		c.RePublish = &jetstream.RePublish{Source: ">", Destination: ">"} // under the transformed subject
		c.Metadata = map[string]string{MetaEventsStreams: strconv.Itoa(n)}
		cfgs[p] = c
	}
	return cfgs
}

// streamsOf reads N from an existing events stream 0: 1 without the
// metadata (a stream created before N existed, or with N = 1).
func streamsOf(cfg jetstream.StreamConfig) int {
	if n, err := strconv.Atoi(cfg.Metadata[MetaEventsStreams]); err == nil && n > 1 {
		return n
	}
	return 1
}

// ResolveEventsStreams returns o with EventsStreams set to the count of the
// events streams that exist, or, when none does, to the count o asks for
// (1 if zero). A count o asks for that differs from the existing one is an
// error: N is fixed when the streams are created.
func ResolveEventsStreams(ctx context.Context, js jetstream.JetStream, ns Namespace, o events.StreamOptions) (events.StreamOptions, error) {
	s, err := js.Stream(ctx, ns.EventsStream())
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		o.EventsStreams = max(o.EventsStreams, 1)
		return o, nil
	case err != nil:
		return o, fmt.Errorf("events: look up stream %s: %w", ns.EventsStream(), err)
	}
	have := streamsOf(s.CachedInfo().Config)
	if o.EventsStreams > 0 && o.EventsStreams != have {
		return o, fmt.Errorf("events: %s was created for %d events stream(s), configured %d: the count is fixed "+
			"when the streams are created (unset JETRUN_EVENTS_STREAMS to use the existing count; to change it, "+
			"docs/operations.md, Spreading events over nodes)", ns.EventsStream(), have, o.EventsStreams)
	}
	o.EventsStreams = have
	partitions.Store(partitionKey{js, ns}, have)
	return o, nil
}

type partitionKey struct {
	js jetstream.JetStream
	ns Namespace
}

// partitions caches N per JetStream context and namespace for the readers
// given no Runtime (Replay): N does not change while the streams exist.
var partitions sync.Map

// eventsPartitions returns N for ns, from the cache or stream 0's metadata.
func eventsPartitions(ctx context.Context, js jetstream.JetStream, ns Namespace) (int, error) {
	if n, ok := partitions.Load(partitionKey{js, ns}); ok {
		return n.(int), nil
	}
	s, err := js.Stream(ctx, ns.EventsStream())
	if err != nil {
		return 0, err
	}
	n := streamsOf(s.CachedInfo().Config)
	partitions.Store(partitionKey{js, ns}, n)
	return n, nil
}

// RememberEventsStreams records that ns has n events streams on js, as Open
// learnt it, so that Replay on js needs no lookup.
func RememberEventsStreams(js jetstream.JetStream, ns Namespace, n int) {
	partitions.Store(partitionKey{js, ns}, max(n, 1))
}

// RunEventsStream returns the name of the stream holding run id's events.
func RunEventsStream(ctx context.Context, js jetstream.JetStream, ns Namespace, runID string) (string, error) {
	n, err := eventsPartitions(ctx, js, ns)
	if err != nil {
		return "", err
	}
	return ns.EventsStreamFor(runID, n), nil
}

// ConsumeContexts is one jetstream.ConsumeContext over the consumers of
// several events streams.
type ConsumeContexts []jetstream.ConsumeContext

// Stop stops every consume context.
func (cs ConsumeContexts) Stop() {
	for _, c := range cs {
		c.Stop()
	}
}

// Drain drains every consume context.
func (cs ConsumeContexts) Drain() {
	for _, c := range cs {
		c.Drain()
	}
}

// Closed returns a channel closed once every consume context is closed.
func (cs ConsumeContexts) Closed() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, c := range cs {
			<-c.Closed()
		}
		close(done)
	}()
	return done
}

// PublishSubject is the subject a writer with no Runtime at hand publishes
// event kind of run id on (EventSubject, with N read once per JetStream
// context and namespace).
func PublishSubject(ctx context.Context, js jetstream.JetStream, ns Namespace, runID, kind string) (string, error) {
	n, err := eventsPartitions(ctx, js, ns)
	if err != nil {
		return "", err
	}
	return ns.EventSubject(runID, kind, n), nil
}

// BalanceEventsLeaders moves the leaders of the n events streams so that no
// node leads more than its share, ceil(n / nodes): a stream led by a node
// over its share is asked to step down in favour of a current replica on
// the node leading fewest ($JS.API.STREAM.LEADER.STEPDOWN with a preferred
// placement, nats-server 2.11 and later). Where the server picks a new
// stream's leader at random, three streams on three nodes get one leader
// each only two times in nine. It does nothing with one stream or on a
// single server. Leaders move on their own when nodes restart; an operator
// balances them again by hand (docs/operations.md).
func BalanceEventsLeaders(ctx context.Context, js jetstream.JetStream, ns Namespace, n int) error {
	names := ns.EventsStreams(n)
	if len(names) < 2 {
		return nil
	}
	for range 10 * len(names) { // each round moves at most one leader
		leaders := map[string]string{}    // stream -> leader
		replicas := map[string][]string{} // stream -> current followers
		led := map[string]int{}           // node -> streams led
		for _, name := range names {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return fmt.Errorf("events: balance leaders: %w", err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				return fmt.Errorf("events: balance leaders: %w", err)
			}
			if info.Cluster == nil || info.Config.Replicas < 2 {
				return nil // nothing to move
			}
			if info.Cluster.Leader == "" {
				break // elections under way: look again
			}
			leaders[name] = info.Cluster.Leader
			led[info.Cluster.Leader]++
			for _, r := range info.Cluster.Replicas {
				if _, ok := led[r.Name]; !ok {
					led[r.Name] = 0
				}
				if r.Current && !r.Offline {
					replicas[name] = append(replicas[name], r.Name)
				}
			}
		}
		if len(leaders) < len(names) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("events: balance leaders: %w", ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		share := (len(names) + len(led) - 1) / len(led)
		moved := false
		for _, name := range names {
			if led[leaders[name]] <= share && led[leaders[name]] <= 1+minLed(led) {
				continue
			}
			target := ""
			for _, r := range replicas[name] {
				if target == "" || led[r] < led[target] {
					target = r
				}
			}
			if target == "" || led[target]+1 >= led[leaders[name]] {
				continue
			}
			if err := stepDown(ctx, js, name, leaders[name], target); err != nil {
				return err
			}
			moved = true
			break
		}
		if !moved {
			return nil
		}
	}
	return nil
}

func minLed(led map[string]int) int {
	m := -1
	for _, c := range led {
		if m < 0 || c < m {
			m = c
		}
	}
	return m
}

// stepDown asks stream's leader, from, to hand over to node, then waits,
// up to stepDownWait, until another node leads it. The server may pick
// another node than the one preferred, or elect from again (a transfer to a
// replica that lags): the caller's next round looks again.
func stepDown(ctx context.Context, js jetstream.JetStream, stream, from, node string) error {
	req := []byte(`{"placement":{"preferred":` + strconv.Quote(node) + `}}`)
	msg, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req)
	if err != nil {
		return fmt.Errorf("events: step down the leader of %s: %w", stream, err)
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if json.Unmarshal(msg.Data, &resp) == nil && resp.Error != nil {
		return fmt.Errorf("events: step down the leader of %s: %s", stream, resp.Error.Description)
	}
	wctx, cancel := context.WithTimeout(ctx, stepDownWait)
	defer cancel()
	for {
		if s, err := js.Stream(wctx, stream); err == nil {
			if info, err := s.Info(wctx); err == nil && info.Cluster != nil &&
				info.Cluster.Leader != "" && info.Cluster.Leader != from {
				return nil
			}
		}
		select {
		case <-wctx.Done():
			return ctx.Err() // nil: still led by from, the next round tries again
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stepDownWait bounds the wait for a stream's new leader.
const stepDownWait = 2 * time.Second
