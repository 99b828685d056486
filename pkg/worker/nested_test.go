package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// delegate is an agent type that hands its work to a child of its own type
// until depth 0, passing the child's chunks through.
func delegate() worker.HandlerFunc {
	return func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var in struct{ Depth int }
		if err := json.Unmarshal(run.Input(), &in); err != nil {
			return worker.Result{}, err
		}
		if err := run.Chunk(ctx, fmt.Sprintf("own chunk at depth %d", in.Depth)); err != nil {
			return worker.Result{}, err
		}
		if in.Depth == 0 {
			return worker.Result{Summary: "leaf"}, nil
		}
		res, err := run.RunChild(ctx, worker.ChildRequest{
			AgentType: "delegate", CallID: "call-1", Input: map[string]int{"depth": in.Depth - 1}, Passthrough: true,
		})
		if err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Summary: fmt.Sprintf("%d>%s", in.Depth, res.Summary), Output: map[string]string{"child": res.RunID}}, nil
	}
}

func newClient(t *testing.T, b *bundle) *parent.Client {
	t.Helper()
	c, err := parent.New(jetruntest.OpenRuntime(t, b.nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A handler at concurrency 1 awaits a child of its own agent type: the
// wait lends the slot out, so the chain completes. Each child is linked to
// its parent with a derived id, and its chunks show on the parent's
// timeline as child-chunk events, never as the parent's own chunks.
func TestRunChildSelfDelegationAtConcurrencyOne(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{Concurrency: 1}, map[string]worker.Handler{"delegate": delegate()})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	res, err := c.Run(ctx, parent.Request{AgentType: "delegate", RunID: "top", Input: map[string]int{"depth": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary != "2>1>leaf" {
		t.Fatalf("summary %q", res.Summary)
	}
	mid := parent.RunID("top", "call-1")
	leaf := parent.RunID(mid, "call-1")
	for _, want := range []struct {
		id, parent string
		depth      int
	}{{mid, "top", 1}, {leaf, mid, 2}} {
		row, _, err := b.store.Get(ctx, want.id)
		if err != nil {
			t.Fatalf("child %s: %v", want.id, err)
		}
		if row.Parent != want.parent || row.Depth != want.depth || row.ParentToolCallID != "call-1" ||
			row.Status != events.StatusCompleted || row.Chunks != 1 {
			t.Fatalf("child row %+v", row)
		}
	}
	top, _, err := b.store.Get(ctx, "top")
	if err != nil {
		t.Fatal(err)
	}
	if top.Chunks != 1 {
		t.Fatalf("top has %d chunks of its own, want 1", top.Chunks)
	}

	// The top run's timeline: its own chunk, then its child's chunks
	// (which include the grandchild's, forwarded by the child).
	var cc []events.ChildChunk
	for ev, err := range wire.Replay(ctx, b.js, "", "top", events.ReplayOptions{Follow: events.HistoryOnly}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == events.KindChildChunk {
			cc = append(cc, *ev.ChildChunk)
		}
	}
	if len(cc) != 1 || cc[0].ChildRunID != mid || cc[0].Seq != 1 || string(cc[0].Data) != `"own chunk at depth 1"` {
		t.Fatalf("child chunks on top's timeline: %+v", cc)
	}
}

// An awaited child that fails gives the handler the failure value; the
// handler goes on. Starting the same call again re-attaches to the child.
func TestRunChildFailureAndReattach(t *testing.T) {
	t.Parallel()
	type seen struct {
		status   events.Status
		msg      string
		same     bool
		reattach bool
	}
	got := make(chan seen, 1)
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"failing": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, errors.New("no luck")
		}),
		"caller": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			req := worker.ChildRequest{AgentType: "failing", CallID: "t1", Input: 1}
			_, err := run.RunChild(ctx, req)
			var f *parent.Failure
			ok := errors.As(err, &f)
			if !ok {
				return worker.Result{}, fmt.Errorf("want a failure, got %v", err)
			}
			again, err := run.Spawn(ctx, req)
			if err != nil {
				return worker.Result{}, err
			}
			_, err2 := again.Await(ctx)
			var f2 *parent.Failure
			errors.As(err2, &f2)
			got <- seen{f.Status, f.Message, f2 != nil && f2.RunID == f.RunID, !again.Created}
			return worker.Result{Summary: "handled"}, nil
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Run(ctx, parent.Request{AgentType: "caller", RunID: "p", Input: 1})
	if err != nil || res.Summary != "handled" {
		t.Fatalf("run: %v %+v", err, res)
	}
	s := <-got
	if s.status != events.StatusError || s.msg != "no luck" || !s.same || !s.reattach {
		t.Fatalf("handler saw %+v", s)
	}
	rows, err := b.store.List(ctx, func(r *model.Row) bool { return r.Parent == "p" })
	if err != nil || len(rows) != 1 {
		t.Fatalf("children of p: %d (%v), want 1", len(rows), err)
	}
}

// While a handler awaits a child, its row shows what it waits for.
func TestRunChildWaitShowsOnTheRow(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{RowSyncInterval: 50 * time.Millisecond}, map[string]worker.Handler{
		"awaits": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			res, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "demo", CallID: "slow",
				Input: map[string]any{"steps": 1, "approveAt": 1}})
			if err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: res.Summary}, nil
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "awaits", RunID: "w", Input: 1}); err != nil {
		t.Fatal(err)
	}
	child := parent.RunID("w", "slow")
	jetruntest.WaitRow(t, b.store, "w", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "run:"+child })
	jetruntest.WaitRow(t, b.store, child, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" })
	if _, err := c.Signal(ctx, child, "approve", json.RawMessage(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, b.store, "w", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.WaitingFor != "" {
		t.Fatalf("row %+v", row)
	}
}

// A handler awaiting its child answers the child's calls itself: it is the
// child's caller. A call handler's error marked with RetryAfter is not the
// answer: the handler is called again.
func TestRunChildAnswersTheChildsCalls(t *testing.T) {
	t.Parallel()
	var triesA atomic.Int32
	b, _ := setup(t, worker.Config{Concurrency: 1}, map[string]worker.Handler{
		"asker": asker(),
		"boss": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			res, err := run.RunChild(ctx, worker.ChildRequest{
				AgentType: "asker", CallID: "delegate", Input: map[string]any{"questions": []string{"a", "b"}},
				Calls: map[string]parent.CallHandler{
					"ask": parent.CallHandlerFunc(func(ctx context.Context, call *parent.Call) (any, error) {
						if call.Parent != run.ID() {
							return nil, fmt.Errorf("call of %s's child reached %s", call.Parent, run.ID())
						}
						var in struct{ Q string }
						if err := json.Unmarshal(call.Input, &in); err != nil {
							return nil, err
						}
						if in.Q == "b" {
							return nil, errors.New("not b")
						}
						if triesA.Add(1) == 1 {
							return nil, jetruntype.RetryAfter(errors.New("ask again"), 10*time.Millisecond)
						}
						return "boss says " + in.Q, nil
					}),
				},
			})
			if err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: res.Summary, Output: res.Output}, nil
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Run(ctx, parent.Request{AgentType: "boss", RunID: "b1", Input: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Output); got != `["\"boss says a\"","error: not b"]` {
		t.Fatalf("output %s", got)
	}
	if n := triesA.Load(); n != 2 {
		t.Fatalf("the call retried after its handler's RetryAfter was served %d times, want 2", n)
	}
}

// A nested run is its parent's tenant's: the child of a run dispatched for
// a tenant carries that tenant, so its reservations on a provider limit
// count toward the same fair share, down the tree.
func TestNestedRunsInheritTheTenant(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	env.StartWorker(t, worker.Config{}, func(w *worker.Worker) { w.HandleFunc("delegate", delegate()) })
	if _, err := env.Client.Run(ctx, parent.Request{AgentType: "delegate", RunID: "top", Tenant: "acme", Input: map[string]int{"depth": 2}}); err != nil {
		t.Fatal(err)
	}
	id := "top"
	for depth := 2; depth >= 0; depth-- {
		row, _, err := env.Store.Latest(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if row.Tenant != "acme" {
			t.Errorf("run %s at depth %d: tenant %q, want acme", id, depth, row.Tenant)
		}
		if depth > 0 {
			var out map[string]string
			if err := json.Unmarshal(row.Output, &out); err != nil {
				t.Fatalf("run %s: output %s: %v", id, row.Output, err)
			}
			id = out["child"]
		}
	}
}
