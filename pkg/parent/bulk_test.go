package parent_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// lastSeq is the last sequence stream has stored: every message it ever
// stored, consumed or not.
func lastSeq(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// TestDispatchManyStoresEachRowAndDispatchOnce dispatches 3,000 runs in
// one DispatchMany on a server with default limits, with bad ids,
// oversize inputs and repeated run ids among them, and no worker running:
// each bad request is reported alone, and the dispatch stream and the runs
// bucket hold exactly one message per run. A worker then runs each once,
// and the same batch again stores nothing.
func TestDispatchManyStoresEachRowAndDispatchOnce(t *testing.T) {
	t.Parallel()
	const n = 3000
	env := jetruntest.NewEnv(t)
	client, err := parent.New(env.Runtime, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := wire.Namespace(env.Namespace)
	runsStream := wire.BucketStream(ns.RunsBucket())
	dispatches0, rows0 := lastSeq(t, env.JS, ns.DispatchStream()), lastSeq(t, env.JS, runsStream)

	oversize := `"` + strings.Repeat("x", events.MaxInputBytes) + `"`
	var reqs []parent.Request
	var wantErr []error
	for i := range n {
		reqs = append(reqs, parent.Request{AgentType: "count", RunID: fmt.Sprintf("many-%d", i), Input: i})
		wantErr = append(wantErr, nil)
		if i%500 == 7 {
			reqs = append(reqs,
				parent.Request{AgentType: "count", RunID: fmt.Sprintf("bad id %d", i), Input: i},
				parent.Request{AgentType: "count", RunID: fmt.Sprintf("too-big-%d", i), Input: json.RawMessage(oversize)},
				parent.Request{AgentType: "count", RunID: fmt.Sprintf("many-%d", i), Input: -i},   // again, at once
				parent.Request{AgentType: "count", RunID: fmt.Sprintf("many-%d", i/2), Input: -i}) // again, chunks later
			wantErr = append(wantErr, parent.ErrBadRequest, parent.ErrBadRequest, nil, nil)
		}
	}
	got := client.DispatchMany(ctx, reqs)
	created := map[string]int{}
	for i, res := range got {
		switch want := wantErr[i]; {
		case want != nil && (!errors.Is(res.Err, want) || res.Run != nil):
			t.Fatalf("request %d (%s): %+v, want %v", i, reqs[i].RunID, res, want)
		case want == nil && (res.Err != nil || res.Run == nil || res.Run.ID != reqs[i].RunID || res.RunID != reqs[i].RunID):
			t.Fatalf("request %d (%s): %+v, want dispatched", i, reqs[i].RunID, res)
		case want == nil && res.Created:
			created[res.RunID]++
		}
		if strings.HasPrefix(reqs[i].RunID, "too-big") && !strings.Contains(res.Err.Error(), "input") {
			t.Fatalf("oversize input reported as %v", res.Err)
		}
	}
	if len(created) != n {
		t.Fatalf("%d runs created, want %d", len(created), n)
	}
	for id, times := range created {
		if times != 1 {
			t.Fatalf("run %s created by %d requests", id, times)
		}
	}
	if d, r := lastSeq(t, env.JS, ns.DispatchStream())-dispatches0, lastSeq(t, env.JS, runsStream)-rows0; d != n || r != n {
		t.Fatalf("stored %d dispatches and %d row writes for %d runs, want one each", d, r, n)
	}
	for _, id := range []string{"too-big-7", "too-big-2507"} {
		if ok, err := jetruntest.HasRun(ctx, client, id); err != nil || ok {
			t.Fatalf("refused request %s: HasRun = %v, %v", id, ok, err)
		}
	}

	c := newCounting(n)
	env.StartWorker(t, worker.Config{Concurrency: 64}, func(w *worker.Worker) { w.Handle("count", c) })
	select {
	case <-c.all:
	case <-time.After(2 * time.Minute):
		runs, _ := c.executions()
		t.Fatalf("%d of %d runs executed", runs, n)
	}
	waitCompleted(t, client, n)
	if runs, total := c.executions(); runs != n || total != n {
		t.Fatalf("%d runs executed %d times", runs, total)
	}

	dispatches, rows := lastSeq(t, env.JS, ns.DispatchStream()), lastSeq(t, env.JS, runsStream)
	for i, res := range client.DispatchMany(ctx, reqs) {
		if wantErr[i] == nil && (res.Err != nil || res.Created || res.Run == nil || res.Run.Status != events.StatusCompleted) {
			t.Fatalf("again: request %d = %+v", i, res)
		}
	}
	if d, r := lastSeq(t, env.JS, ns.DispatchStream())-dispatches, lastSeq(t, env.JS, runsStream)-rows; d != 0 || r != 0 {
		t.Fatalf("the same batch again stored %d dispatches and %d row writes", d, r)
	}
}
