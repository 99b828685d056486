package parent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// counting counts the executions of each run and signals when want runs
// have executed at least once.
type counting struct {
	mu   sync.Mutex
	runs map[string]int
	want int
	all  chan struct{}
}

func newCounting(want int) *counting {
	return &counting{runs: map[string]int{}, want: want, all: make(chan struct{})}
}

func (c *counting) ServeRun(_ context.Context, run *worker.Run) (worker.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[run.ID()]++
	if len(c.runs) == c.want {
		close(c.all)
	}
	return worker.Result{Summary: "done"}, nil
}

func (c *counting) executions() (runs, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.runs {
		total += n
	}
	return len(c.runs), total
}

// waitCompleted polls until n rows are completed.
func waitCompleted(t *testing.T, client *parent.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rows, err := client.List(t.Context(), events.StatusCompleted)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs completed", len(rows), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDispatchManyRunsEveryRunOnceAndAgainStartsNothing dispatches 3,000
// runs in one batch on a server with default limits: every one completes,
// once; the same batch again starts nothing and queues nothing.
func TestDispatchManyRunsEveryRunOnceAndAgainStartsNothing(t *testing.T) {
	t.Parallel()
	const n = 3000
	env := jetruntest.NewEnv(t)
	c := newCounting(n)
	env.StartWorker(t, worker.Config{Concurrency: 64}, func(w *worker.Worker) { w.Handle("count", c) })
	ctx := t.Context()

	reqs := make([]parent.Request, n)
	for i := range reqs {
		reqs[i] = parent.Request{AgentType: "count", RunID: fmt.Sprintf("bulk-%d", i), Input: i}
	}
	for i, res := range env.Client.DispatchMany(ctx, reqs) {
		if res.Err != nil || !res.Created || res.Run == nil || res.RunID != reqs[i].RunID {
			t.Fatalf("result %d = %+v", i, res)
		}
	}
	select {
	case <-c.all:
	case <-time.After(2 * time.Minute):
		runs, _ := c.executions()
		t.Fatalf("%d of %d runs executed", runs, n)
	}
	waitCompleted(t, env.Client, n)

	for i, res := range env.Client.DispatchMany(ctx, reqs) {
		if res.Err != nil || res.Created || res.Run == nil || res.Run.Status != events.StatusCompleted {
			t.Fatalf("again: result %d = %+v", i, res)
		}
	}
	cons, err := env.JS.Consumer(ctx, wire.Namespace(env.Namespace).DispatchStream(), wire.AgentConsumer("count"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("after the same batch again: %d dispatches pending, %d held", info.NumPending, info.NumAckPending)
	}
	if runs, total := c.executions(); runs != n || total != n {
		t.Fatalf("%d runs executed %d times", runs, total)
	}
}

// TestDispatchManyReportsBadItemsAndDispatchesTheRest mixes a bad id, an
// unknown agent type and an oversize input into a batch: each is reported
// on its own, and the others run, a run id given twice once.
func TestDispatchManyReportsBadItemsAndDispatchesTheRest(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	c := newCounting(3)
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) { w.Handle("count", c) })
	ctx := t.Context()

	oversize := json.RawMessage(`"` + strings.Repeat("x", events.MaxInputBytes) + `"`)
	reqs := []parent.Request{
		{AgentType: "count", RunID: "good-1", Input: 1},
		{AgentType: "count", RunID: "bad id", Input: 2},
		{AgentType: "nobody-serves-this", RunID: "unknown-type", Input: 3},
		{AgentType: "count", RunID: "good-2", Input: 4},
		{AgentType: "count", RunID: "too-big", Input: oversize},
		{AgentType: "count", Input: 5},                  // a generated id
		{AgentType: "count", RunID: "good-1", Input: 6}, // twice in a batch: one run
	}
	got := env.Client.DispatchMany(ctx, reqs)
	if got[0].Created == got[6].Created || got[6].Err != nil || got[6].Run == nil || got[6].Run.ID != "good-1" {
		t.Fatalf("good-1 twice: %+v and %+v, want one run created once", got[0], got[6])
	}
	got[0].Created, got[6].Created = true, true
	wantErr := []error{nil, parent.ErrBadRequest, parent.ErrUnknownAgentType, nil, parent.ErrBadRequest, nil, nil}
	for i, res := range got {
		switch {
		case wantErr[i] == nil && (res.Err != nil || !res.Created):
			t.Errorf("request %d: %+v, want dispatched", i, res)
		case wantErr[i] != nil && (!errors.Is(res.Err, wantErr[i]) || res.Run != nil):
			t.Errorf("request %d: %+v, want %v", i, res, wantErr[i])
		}
	}
	if got[5].RunID == "" || got[5].Run == nil || got[5].Run.ID != got[5].RunID {
		t.Fatalf("generated id: %+v", got[5])
	}
	if !strings.Contains(got[4].Err.Error(), "input") {
		t.Fatalf("oversize input reported as %v", got[4].Err)
	}
	select {
	case <-c.all:
	case <-time.After(time.Minute):
		t.Fatal("the good runs did not run")
	}
	for _, id := range []string{"good-1", "good-2", got[5].RunID} {
		jetruntest.WaitRow(t, env.Store, id, time.Minute, jetruntest.Final)
	}
	if runs, total := c.executions(); runs != 3 || total != 3 {
		t.Fatalf("%d runs executed %d times", runs, total)
	}
	for _, id := range []string{"unknown-type", "too-big"} {
		if ok, err := jetruntest.HasRun(ctx, env.Client, id); err != nil || ok {
			t.Fatalf("HasRun(%s) = %v, %v", id, ok, err)
		}
	}
}

// A request of DispatchMany that needs approval and is refused comes back
// as Dispatch's does: a result (Rejected, the person's answer), not an
// error, and nothing is dispatched; the batch's other requests run.
func TestDispatchManyGivesARefusedApprovalAsAResult(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	c := newCounting(2)
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) {
		w.Handle("count", c)
		w.HandleFunc("block", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		})
	})
	ctx := t.Context()
	if _, err := env.Client.Dispatch(ctx, parent.Request{AgentType: "block", RunID: "boss", Input: 1}); err != nil {
		t.Fatal(err)
	}
	reqs := []parent.Request{
		{AgentType: "count", RunID: "refused", Input: 1, Parent: "boss", Approval: &parent.Approval{}},
		{AgentType: "count", RunID: "approved", Input: 2, Parent: "boss", Approval: &parent.Approval{}},
		{AgentType: "count", RunID: "plain", Input: 3},
	}
	results := make(chan []parent.DispatchResult, 1)
	go func() { results <- env.Client.DispatchMany(ctx, reqs) }()
	st := engine.From(env.Runtime).Asks()
	for child, value := range map[string]string{"refused": `{"approved":false,"comment":"no"}`, "approved": `{"approved":true}`} {
		a := jetruntest.WaitAsk(t, st, asks.SignalID("boss", asks.ApprovalName(child), 0), 30*time.Second,
			func(a *events.Ask) bool { return a.Status == events.AskOpen })
		if _, err := st.Answer(ctx, a.ID, a.Digest, json.RawMessage(value), "ops"); err != nil {
			t.Fatal(err)
		}
	}
	got := <-results
	if r := got[0]; r.Err != nil || r.Run != nil || string(r.Rejected) != `{"approved":false,"comment":"no"}` {
		t.Fatalf("the refused request: %+v; want Rejected, the answer, and no error", r)
	}
	for _, r := range got[1:] {
		if r.Err != nil || r.Run == nil || !r.Created || r.Rejected != nil {
			t.Fatalf("request %s: %+v; want it dispatched", r.RunID, r)
		}
	}
	select {
	case <-c.all:
	case <-time.After(time.Minute):
		runs, _ := c.executions()
		t.Fatalf("%d of 2 runs executed", runs)
	}
	if _, err := env.Client.Inspect(ctx, "refused"); !errors.Is(err, parent.ErrRunNotFound) {
		t.Fatalf("the refused run was dispatched: %v", err)
	}
}
