//go:build cluster

package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// TestClusterEventsSpreadOverNodes runs the same streaming runs on the
// nats-cluster/ three-node cluster twice: in a namespace with one events
// stream (the default) and in one with three (JETRUN_EVENTS_STREAMS=3),
// all with three replicas; the second as the roles of nats-users.conf (a
// parent creates the streams, a child works, a producer replays). It prints each node's share of the events
// streams' leaders and of the events those leaders stored: with one stream
// one node leads every event; with three each node leads one stream and
// about a third of the events (chunk coalescing off: one event per
// chunk). (Every node stores a copy of every event
// either way: three replicas on three nodes.)
func TestClusterEventsSpreadOverNodes(t *testing.T) {
	c := startCluster(t)
	nc, err := nats.Connect(c.url(), nats.UserInfo("admin", rolePasswords["admin"]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	const (
		runs   = 90
		chunks = 50
	)
	errs := make(chan error, 16)
	connect := func(user string) *nats.Conn {
		t.Helper()
		nc, err := roleConn(c.url(), user, errs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	for _, tc := range []struct {
		prefix  string
		streams int
		roles   bool // the roles of nats-users.conf: parent creates, child works, producer replays
	}{{"spread1", 1, false}, {"", 3, true}} {
		streams, prefix := tc.streams, tc.prefix
		ns := wire.Namespace(prefix)
		creator, workerConn := nc, nc
		if tc.roles {
			creator, workerConn = connect("parent"), connect("child")
		}
		rt := jetruntest.OpenRuntime(t, creator, jetrun.Config{Namespace: events.Namespace(prefix),
			Streams: events.StreamOptions{Replicas: 3, EventsStreams: streams}})
		if tc.roles { // as parent-worker does: child-workers may create nothing, dispatch consumers included
			js := engine.From(rt).JetStream()
			if _, err := registry.Open(context.Background(), js, ns, 3); err != nil {
				t.Fatal(err)
			}
			for _, cfg := range []jetstream.ConsumerConfig{
				wire.AgentConsumerConfig(ns, "stream", worker.DefaultLease, worker.DefaultFleetConcurrency),
				wire.MalformedConsumerConfig(ns),
			} {
				if _, err := js.CreateOrUpdateConsumer(context.Background(), ns.DispatchStream(), cfg); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Every other process adopts the count the streams were created with.
		wrt := jetruntest.OpenRuntime(t, workerConn, jetrun.Config{Namespace: events.Namespace(prefix),
			Streams: events.StreamOptions{Replicas: 3}})
		if got := len(engine.From(wrt).EventsStreams()); got != streams {
			t.Fatalf("a worker adopted %d events streams, want %d", got, streams)
		}
		w, err := worker.New(wrt, worker.Config{Concurrency: runs, ChunkWindow: -1}) // one event per chunk
		if err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("stream", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for i := range chunks {
				if err := run.Chunk(ctx, i); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{}, nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		client, err := parent.New(rt, parent.Config{})
		if err != nil {
			t.Fatal(err)
		}
		reqs := make([]parent.Request, runs)
		for i := range reqs {
			reqs[i] = parent.Request{AgentType: "stream", RunID: fmt.Sprintf("sp-%03d", i), Input: i}
		}
		start := time.Now()
		for _, o := range client.RunAll(ctx, reqs) {
			if o.Err != nil {
				t.Fatalf("%s: run %s: %v", prefix, o.RunID, o.Err)
			}
		}
		took := time.Since(start)
		_ = w.Stop()
		if tc.roles {
			prt := jetruntest.OpenRuntime(t, connect("producer"), jetrun.Config{Streams: events.StreamOptions{Replicas: 3}})
			viewer, err := parent.New(prt, parent.Config{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reqs[:6] { // runs of every partition
				seq, err := viewer.Replay(ctx, r.RunID, parent.ReplayOptions{Follow: events.HistoryOnly, Kinds: []string{events.KindChunk}})
				if err != nil {
					t.Fatal(err)
				}
				got := 0
				for _, err := range seq {
					if err != nil {
						t.Fatalf("producer replays %s: %v", r.RunID, err)
					}
					got++
				}
				if got != chunks {
					t.Fatalf("producer replays %d chunks of %s, want %d", got, r.RunID, chunks)
				}
			}
		}

		led, ledEvents, stored := map[string]int{}, map[string]uint64{}, map[string]uint64{}
		for _, name := range c.names {
			led[name], ledEvents[name], stored[name] = 0, 0, 0
		}
		var total uint64
		for _, name := range ns.EventsStreams(streams) {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx)
			if err != nil || info.Cluster == nil {
				t.Fatalf("%s: %v", name, err)
			}
			msgs := info.State.Msgs
			total += msgs
			led[info.Cluster.Leader]++
			ledEvents[info.Cluster.Leader] += msgs
			stored[info.Cluster.Leader] += msgs
			for _, r := range info.Cluster.Replicas {
				stored[r.Name] += msgs
			}
			t.Logf("%s led by %s, %d events", name, info.Cluster.Leader, msgs)
		}
		cancel()
		var lines []string
		nodes := append([]string(nil), c.names[:]...)
		sort.Strings(nodes)
		for _, node := range nodes {
			lines = append(lines, fmt.Sprintf("%s leads %d of %d events streams, %.0f %% of the events (stores %.0f %%)",
				node, led[node], streams, 100*float64(ledEvents[node])/float64(total), 100*float64(stored[node])/float64(total)))
		}
		t.Logf("JETRUN_EVENTS_STREAMS=%d: %d runs × %d chunks in %s, %d events stored\n  %s", streams, runs, chunks,
			took.Round(time.Millisecond), total, strings.Join(lines, "\n  "))
		if streams == 3 {
			for _, node := range nodes {
				if led[node] != 1 || ledEvents[node] < total/10 {
					t.Errorf("%s leads %d events streams and %d of %d events: not spread", node, led[node], ledEvents[node], total)
				}
			}
		}
	}
	select {
	case err := <-errs:
		t.Fatalf("a role was refused: %v", err)
	default:
	}
}
