package runview_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

// A view that has not seen a run end never refuses the run's finish. On a
// five-node cluster the runs bucket has three replicas, a, b and c; the
// view follows the bucket through a only. The run ends while a is down;
// then b and c stop and a comes back behind them: the runs stream has no
// leader (the cluster, with a quorum of its five nodes, still has a meta
// leader), the view cannot watch it, and a, a replica that knows it has no
// leader, answers the bucket's status from its own state, which is no
// newer than the view. Judged with that, the finish was refused as forged
// (nemesis seed 312635475, run nm00051-detached: "ended []; no transition
// recorded its completed ending 1"). Vouch cannot tell until the view has
// the row the stream's leader has: once b and c are back, the finish is
// vouched for, and a copy of it to another handler is still refused.
func TestVouchWaitsForTheRowTheLeaderHas(t *testing.T) {
	t.Parallel()
	c := natstest.RunNodes(t, 5)
	ctx := context.Background()

	wjs := jsConn(t, c.URL(3)+","+c.URL(4))
	if _, err := runstore.Open(ctx, wjs, runstore.Config{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitForStreamLeaders(t, wjs, "KV_jetrun_runs", "KV_jetrun_active")
	a, b, cc := replicas(t, c, wjs, "KV_jetrun_runs")
	kv, err := wjs.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	rt := jetruntest.OpenRuntime(t, natsConn(t, c.URL(a), nats.IgnoreDiscoveredServers()), jetrun.Config{Streams: events.StreamOptions{Replicas: 3}})
	v, err := runview.Start(ctx, rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)

	run := &model.Row{ID: "behind", AgentType: "demo", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	liveRev := put(t, kv, run)
	natstest.Eventually(t, 30*time.Second, func() bool {
		p, _ := v.List(runview.Filter{IDContains: run.ID})
		return len(p.Runs) == 1 && p.Runs[0].Status == events.StatusRunning
	}, "the view did not list the running run")

	c.Stop(a)
	run.Status = events.StatusCompleted
	run.Finishes = map[events.Status]*model.FinishState{events.StatusCompleted: {Slot: model.Slot{DueAt: time.Now()}}}
	put(t, kv, run)
	c.Stop(b)
	c.Stop(cc)
	c.Start(a)
	// The condition: a answers the bucket's status from its own state.
	natstest.Eventually(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		rev, err := engine.From(rt).Store().LastRevision(ctx)
		return err == nil && rev == liveRev
	}, "replica %s, alone and behind, did not answer the runs bucket's status", c.Node(a).Name())

	owed := finish.Result{RunID: run.ID, Handler: "h", Status: events.StatusCompleted}
	vouch := func() error {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		return v.Vouch(ctx, owed)
	}
	if err := vouch(); err == nil || errors.Is(err, finish.ErrNotOwed) {
		t.Fatalf("vouch with the view behind the run's end: %v, want a fault to retry (not nil, not ErrNotOwed)", err)
	}

	c.Start(b)
	c.Start(cc)
	for deadline := time.Now().Add(90 * time.Second); ; {
		err := vouch()
		if err == nil {
			break
		}
		if errors.Is(err, finish.ErrNotOwed) || time.Now().After(deadline) {
			t.Fatalf("the replicas back, the finish the run's transition recorded: %v, want it vouched for", err)
		}
		time.Sleep(50 * time.Millisecond) // poll
	}
	forged := owed
	forged.Handler = "other"
	if err := v.Vouch(ctx, forged); !errors.Is(err, finish.ErrNotOwed) {
		t.Errorf("a copy of the finish to another handler: %v, want ErrNotOwed", err)
	}
}

// replicas returns the indexes in c of the three nodes holding stream.
func replicas(t *testing.T, c *natstest.Nodes, js jetstream.JetStream, stream string) (int, int, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream %s's replicas: %+v, %v", stream, info, err)
	}
	return c.Index(info.Cluster.Leader), c.Index(info.Cluster.Replicas[0].Name), c.Index(info.Cluster.Replicas[1].Name)
}

// jsConn connects to urls, reconnecting without limit, closed at the
// test's cleanup.
func jsConn(t *testing.T, urls string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natsConn(t, urls, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// put writes r as its row and returns the revision, retrying while the
// bucket elects a leader.
func put(t *testing.T, kv jetstream.KeyValue, r *model.Row) uint64 {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rev, err := kv.Put(ctx, r.ID, data)
		cancel()
		if err == nil {
			return rev
		}
		if time.Now().After(deadline) {
			t.Fatalf("put row %s: %v", r.ID, err)
		}
	}
}

// natsConn connects to urls, reconnecting without end.
func natsConn(t *testing.T, urls string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(urls, append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
