package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// nestWorker starts the test worker serving "nester" and "caller".
func (e *env) nestWorker(t *testing.T, id string, args ...string) *proc {
	t.Helper()
	p := start(t, "nestworker", nil, append([]string{e.url, id}, args...)...)
	p.waitLog("nestworker serving", 60*time.Second)
	return p
}

// A handler killed with -9 while it awaits a nested child: the run is taken
// over and the new attempt re-attaches to the same child (no second child,
// the child executed once), passes the rest of its chunks through without
// repeating any, and returns the child's result.
func TestKilledHandlerReattachesToItsNestedChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "child-demo", nil)
	a := e.nestWorker(t, "nest-a")
	const id, steps = "nester-1", 20
	if _, err := e.client.Dispatch(context.Background(), parent.Request{
		AgentType: "nester", RunID: id, Input: map[string]int{"steps": steps, "stepMs": 200},
	}); err != nil {
		t.Fatal(err)
	}
	child := parent.RunID(id, "c1")
	jetruntest.WaitRow(t, e.store, child, 30*time.Second, func(r *model.Row) bool { return r.Milestones >= 3 })
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool {
		return r.Worker == "nest-a" && r.WaitingFor == "run:"+child
	})
	a.kill()
	e.nestWorker(t, "nest-b")

	row := jetruntest.WaitRow(t, e.store, id, 90*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("nester: %s (%s) attempt %d", row.Status, row.Error, row.Attempt)
	}
	var out struct {
		Child       string      `json:"child"`
		ChildOutput demo.Output `json:"childOutput"`
		Attempt     int         `json:"attempt"`
	}
	if err := json.Unmarshal(row.Output, &out); err != nil {
		t.Fatal(err)
	}
	if out.Child != child || out.Attempt != 2 || out.ChildOutput.Attempt != 1 || out.ChildOutput.StepsRunHere != steps {
		t.Fatalf("nester output %s", row.Output)
	}
	children, err := e.store.List(context.Background(), func(r *model.Row) bool { return r.Parent == id })
	if err != nil || len(children) != 1 || children[0].ID != child {
		t.Fatalf("children of %s: %d (%v), want exactly %s", id, len(children), err, child)
	}
	if s := fmt.Sprint(jetruntest.Statuses(waitFinalEvent(t, e.js, child))); s != "[running completed]" {
		t.Fatalf("child statuses %s: it executed more than once", s)
	}
	// The child's chunks on the parent's timeline: every one, once, across
	// both attempts.
	var seqs []int
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ev, err := range wire.Replay(ctx, e.js, "", id, events.ReplayOptions{Follow: events.HistoryOnly}) {
		if err != nil {
			t.Fatal(err)
		}
		if cc := ev.ChildChunk; cc != nil {
			if cc.ChildRunID != child {
				t.Fatalf("child chunk of %s", cc.ChildRunID)
			}
			seqs = append(seqs, int(cc.Seq))
		}
		if ev.Chunk != nil {
			t.Fatalf("the nester has a chunk of its own: %+v", ev.Chunk)
		}
	}
	if !slices.Equal(seqs, oneTo(steps)) {
		t.Fatalf("forwarded child chunks %v, want 1..%d once each", seqs, steps)
	}
}

// A child killed with -9 while it awaits the reply to a call: the new
// attempt finds the stored call, does not ask again, and gets the reply
// the parent stores after the takeover; the call handler runs once.
func TestKilledCallerGetsTheReplyAfterTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var runs atomic.Int32
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	srv, err := e.client.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleFunc("ask", func(ctx context.Context, call *parent.Call) (any, error) {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]any{"echo": call.Input, "seq": call.Seq}, nil
	})
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	a := e.nestWorker(t, "call-a")
	const id = "caller-1"
	if _, err := e.client.Dispatch(ctx, parent.Request{AgentType: "caller", RunID: id, Input: map[string]string{"q": "where"}}); err != nil {
		t.Fatal(err)
	}
	<-started
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "call:ask" })
	a.kill()
	e.nestWorker(t, "call-b")
	jetruntest.WaitRow(t, e.store, id, 60*time.Second, func(r *model.Row) bool {
		return r.Attempt == 2 && r.Worker == "call-b" && r.WaitingFor == "call:ask"
	})
	close(release)

	row := jetruntest.WaitRow(t, e.store, id, 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("caller: %s (%s) attempt %d", row.Status, row.Error, row.Attempt)
	}
	if got := string(row.Output); got != `{"answer":{"echo":{"q":"where"},"seq":1},"attempt":2}` {
		t.Fatalf("caller output %s", got)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the call handler ran %d times, want 1", n)
	}
	calls, err := e.client.Calls(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].Call.Attempt != 1 || calls[0].Reply == nil {
		t.Fatalf("calls %+v", calls)
	}
	var stored int
	for _, ev := range jetruntest.ReadEvents(t, e.js, id) {
		if ev.Kind == events.KindCall {
			stored++
		}
	}
	if stored != 1 {
		t.Fatalf("%d call events stored, want 1 (asked twice)", stored)
	}
}

// A parent process killed with -9 while its call handler runs: the call
// stays unanswered and unacknowledged, and the parent started next answers
// it, once; the run gets that answer.
func TestKilledCallServerIsReplacedAndAnswersOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.nestWorker(t, "cs-worker")
	hang := start(t, "callserver", nil, e.url, "hang")
	hang.waitLog("callserver serving", 60*time.Second)
	const id = "cs-1"
	if _, err := e.client.Dispatch(ctx, parent.Request{AgentType: "caller", RunID: id, Input: map[string]string{"q": "x"}}); err != nil {
		t.Fatal(err)
	}
	hang.waitLog("call received", 30*time.Second)
	hang.kill()
	answer := start(t, "callserver", nil, e.url, "answer")
	row := jetruntest.WaitRow(t, e.store, id, 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || string(row.Output) != `{"answer":{"by":"answer","q":{"q":"x"}},"attempt":1}` {
		t.Fatalf("caller: %s (%s) %s", row.Status, row.Error, row.Output)
	}
	if n := strings.Count(answer.stderr.String(), "answering call"); n != 1 {
		t.Fatalf("the second server answered %d times", n)
	}
	calls, err := e.client.Calls(ctx, id)
	if err != nil || len(calls) != 1 || calls[0].Reply == nil {
		t.Fatalf("calls %+v %v", calls, err)
	}
}

// A handler that answers its child's calls is killed with -9 (with the
// child, in the same process) while the call waits: both are taken over,
// the child finds its stored call, and the new attempt of the handler
// answers it; the call is made once and answered once.
func TestKilledHandlerAnswersItsChildsCallAfterTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.nestWorker(t, "boss-a")
	const id = "boss-1"
	if _, err := e.client.Dispatch(context.Background(), parent.Request{AgentType: "boss", RunID: id, Input: map[string]string{"q": "go?"}}); err != nil {
		t.Fatal(err)
	}
	child := parent.RunID(id, "b1")
	jetruntest.WaitRow(t, e.store, child, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "call:ask" })
	a.waitLog("boss got a call", 30*time.Second)
	a.kill()
	e.nestWorker(t, "boss-b")

	row := jetruntest.WaitRow(t, e.store, id, 90*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 || string(row.Output) != `{"answer":{"boss":2},"attempt":2}` {
		t.Fatalf("boss: %s (%s) attempt %d output %s", row.Status, row.Error, row.Attempt, row.Output)
	}
	calls, err := e.client.Calls(context.Background(), child)
	if err != nil || len(calls) != 1 || calls[0].Call.Attempt != 1 || calls[0].Reply == nil {
		t.Fatalf("child calls %+v %v", calls, err)
	}
	var stored, replies int
	for _, ev := range jetruntest.ReadEvents(t, e.js, child) {
		switch ev.Kind {
		case events.KindCall:
			stored++
		case events.KindReply:
			replies++
		}
	}
	if stored != 1 || replies != 1 {
		t.Fatalf("child has %d call and %d reply events, want 1 and 1", stored, replies)
	}
}
