package wire_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// With one events stream, the default, JETRUN_EVENTS is configured as it
// always was: jetrun.run.>, no transform, no republish, no metadata.
func TestOneEventsStreamIsTheOldStream(t *testing.T) {
	t.Parallel()
	var evs []jetstream.StreamConfig
	for _, c := range wire.StreamConfigs("", events.StreamOptions{}) {
		if strings.HasPrefix(c.Name, "JETRUN_EVENTS") {
			evs = append(evs, c)
		}
	}
	if len(evs) != 1 {
		t.Fatalf("%d events streams, want 1", len(evs))
	}
	if c := evs[0]; c.Name != "JETRUN_EVENTS" || !slices.Equal(c.Subjects, []string{"jetrun.run.>"}) ||
		c.SubjectTransform != nil || c.RePublish != nil || c.Metadata != nil {
		t.Fatalf("events stream %+v", c)
	}
	if got := wire.Namespace("").EventSubject("r1", "chunk", 1); got != "jetrun.run.r1.chunk" {
		t.Fatalf("publish subject with one stream: %s", got)
	}
}

// spreadServer starts a server whose account maps the documented run
// subjects onto three events streams, as docs/operations.md tells an
// operator to, and creates the streams.
func spreadServer(t *testing.T, n int) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := natstest.RunServer(t)
	from, to := wire.Namespace("").EventsMapping(n)
	if err := s.GlobalAccount().AddMapping(from, to); err != nil {
		t.Fatal(err)
	}
	nc, js := natstest.Connect(t, s)
	if err := wire.EnsureStreams(context.Background(), js, "", events.StreamOptions{EventsStreams: n}); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// With three events streams every stream stores some runs' events and none
// stores another partition's run, whether the writer publishes on the
// ingest subject (jetrun's writers) or on the documented subject through
// the operator's mapping (an outside writer): jetrun's hash is the server's.
// Stored and republished subjects are the documented ones, and a fence on
// the stored status subject holds.
func TestEventsSpreadOverStreams(t *testing.T) {
	t.Parallel()
	const n = 3
	nc, js := spreadServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns := wire.Namespace("")
	live, err := nc.SubscribeSync("jetrun.run.>")
	if err != nil {
		t.Fatal(err)
	}
	const runs = 30
	for i := range runs {
		id := fmt.Sprintf("spread-%d", i)
		subject := ns.EventSubject(id, events.KindChunk, n)
		if i%2 == 1 {
			subject = ns.RunSubject(id, events.KindChunk) // through the account mapping
		}
		if _, err := js.Publish(ctx, subject, []byte(`{"runId":"`+id+`","seq":1}`)); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
	perStream := map[string]int{}
	for p, name := range ns.EventsStreams(n) {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		for subject := range info.State.Subjects {
			id, _, err := ns.ParseRunSubject(subject)
			if err != nil {
				t.Fatalf("%s stores %s, not a documented run subject", name, subject)
			}
			if got := wire.Partition(id, n); got != p {
				t.Errorf("%s (partition %d) stores run %s of partition %d", name, p, id, got)
			}
		}
		perStream[name] = int(info.State.Msgs)
		if info.State.Msgs == 0 {
			t.Errorf("%s stores nothing", name)
		}
	}
	t.Logf("events per stream: %v", perStream)
	for range runs {
		m, err := live.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("core subscriber: %v", err)
		}
		if !strings.HasPrefix(m.Subject, "jetrun.run.spread-") {
			t.Fatalf("core subscriber got %s", m.Subject)
		}
	}
	if m, err := live.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("core subscriber got %s twice (a republish loop)", m.Subject)
	}

	// The fence names the stored subject, as with one stream.
	id := "spread-fenced"
	fenced := func(seq uint64) error {
		m := nats.NewMsg(ns.EventSubject(id, events.KindStatus, n))
		m.Data = []byte(`{}`)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(seq, 10))
		m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, ns.RunSubject(id, events.KindStatus))
		_, err := js.PublishMsg(ctx, m)
		return err
	}
	if err := fenced(0); err != nil {
		t.Fatal(err)
	}
	if err := fenced(0); err == nil {
		t.Fatal("a stale fence passed")
	}
}

// Replay reads each run from its own stream: history, a kinds filter, and a
// live follow until the run ends, with runs in every partition.
func TestReplayAcrossEventsStreams(t *testing.T) {
	t.Parallel()
	const n = 3
	_, js := spreadServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns := wire.Namespace("")
	publish := func(id, kind, data string) {
		t.Helper()
		if _, err := js.Publish(ctx, ns.EventSubject(id, kind, n), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[int]string{}
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("replay-%d", i)
		if _, ok := ids[wire.Partition(id, n)]; !ok {
			ids[wire.Partition(id, n)] = id
		}
	}
	for _, id := range ids {
		publish(id, events.KindStatus, `{"runId":"`+id+`","status":"running","at":"2026-01-01T00:00:00Z"}`)
		for seq := 1; seq <= 3; seq++ {
			publish(id, events.KindChunk, fmt.Sprintf(`{"runId":%q,"seq":%d,"data":"c%d"}`, id, seq, seq))
		}
	}
	for p, id := range ids {
		evs, err := replayAll(ctx, js, id, events.ReplayOptions{Follow: events.HistoryOnly})
		if err != nil || !slices.Equal(kindsOf(evs), []string{"status", "chunk", "chunk", "chunk"}) {
			t.Fatalf("partition %d run %s history: %v, %v", p, id, kindsOf(evs), err)
		}
		for i, ev := range evs {
			if ev.RunID != id || (i > 0 && ev.Chunk.Seq != int64(i)) {
				t.Fatalf("partition %d run %s event %d: %+v", p, id, i, ev)
			}
		}
		chunks, err := replayAll(ctx, js, id, events.ReplayOptions{Follow: events.HistoryOnly, Kinds: []string{events.KindChunk}})
		if err != nil || len(chunks) != 3 {
			t.Fatalf("partition %d run %s chunks: %v, %v", p, id, kindsOf(chunks), err)
		}
	}
	id := ids[n-1]
	done := make(chan error, 1)
	var got []events.Event
	go func() {
		evs, err := replayAll(ctx, js, id, events.ReplayOptions{Follow: events.UntilEnd})
		got = evs
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	publish(id, events.KindChunk, `{"runId":"`+id+`","seq":4,"data":"live"}`)
	publish(id, events.KindStatus, `{"runId":"`+id+`","status":"completed","at":"2026-01-01T00:00:01Z"}`)
	if err := <-done; err != nil || len(got) != 6 || got[5].Status == nil || got[5].Status.Status != events.StatusCompleted {
		t.Fatalf("follow to the end: %v, %v", kindsOf(got), err)
	}
}

// N is fixed when the events streams are created: a process asking for
// nothing adopts it, one asking for another count is refused.
func TestEventsStreamsFixedAtCreation(t *testing.T) {
	t.Parallel()
	_, js := spreadServer(t, 3)
	ctx := context.Background()
	o, err := wire.ResolveEventsStreams(ctx, js, "", events.StreamOptions{})
	if err != nil || o.EventsStreams != 3 {
		t.Fatalf("adopted %d, %v; want 3", o.EventsStreams, err)
	}
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{EventsStreams: 2}); err == nil ||
		!strings.Contains(err.Error(), "created for 3") {
		t.Fatalf("another count: %v", err)
	}
	_, one := natstest.Connect(t, natstest.RunServer(t))
	if err := wire.EnsureStreams(ctx, one, "", events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wire.EnsureStreams(ctx, one, "", events.StreamOptions{EventsStreams: 3}); err == nil {
		t.Fatal("three streams asked of a namespace created with one")
	}
	if err := (events.StreamOptions{EventsStreams: events.MaxEventsStreams + 1}).Validate(); err == nil {
		t.Fatal("too many events streams validated")
	}
}

// On a three-node cluster the creator of three three-replica events streams
// leaves one leader on each node, and BalanceEventsLeaders spreads them
// again after two end up on one node.
func TestEventsLeadersBalanced(t *testing.T) {
	t.Parallel()
	servers := natstest.RunCluster(t)
	nc, js := natstest.Connect(t, servers[0])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := wire.Namespace("")
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{EventsStreams: 3, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	// leaders reads each stream's leader; during a leader change a read may
	// time out, which lookup reports as an error.
	lookup := func() (map[string]string, error) {
		m := map[string]string{}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for _, name := range ns.EventsStreams(3) {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if info.Cluster == nil {
				return nil, fmt.Errorf("%s: no cluster info", name)
			}
			m[name] = info.Cluster.Leader
		}
		return m, nil
	}
	leaders := func() map[string]string {
		t.Helper()
		var m map[string]string
		natstest.Eventually(t, 30*time.Second, func() bool {
			var err error
			m, err = lookup()
			return err == nil
		}, "the events streams' leaders could not be read")
		return m
	}
	spread := func(m map[string]string) bool {
		nodes := map[string]bool{}
		for _, l := range m {
			nodes[l] = l != ""
		}
		return len(nodes) == 3 && !slices.Contains(slices.Collect(func(yield func(bool) bool) {
			for _, ok := range nodes {
				if !yield(ok) {
					return
				}
			}
		}), false)
	}
	if m := leaders(); !spread(m) {
		t.Fatalf("leaders after creation: %v", m)
	}
	// Move JETRUN_EVENTS_1's leader to JETRUN_EVENTS's node.
	m := leaders()
	req := `{"placement":{"preferred":"` + m["JETRUN_EVENTS"] + `"}}`
	if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.JETRUN_EVENTS_1", []byte(req), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		now, err := lookup()
		return err == nil && now["JETRUN_EVENTS_1"] == m["JETRUN_EVENTS"]
	}, "JETRUN_EVENTS_1 did not move")
	if err := wire.BalanceEventsLeaders(ctx, js, ns, 3); err != nil {
		t.Fatal(err)
	}
	if m := leaders(); !spread(m) {
		t.Fatalf("leaders after balancing: %v", m)
	}
	t.Logf("leaders after balancing: %v", leaders())
}
