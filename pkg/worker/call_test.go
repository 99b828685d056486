package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// asker calls "ask" with each question of its input and reports what came
// back: the answer, or the call's error.
func asker() worker.HandlerFunc {
	return func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var in struct{ Questions []string }
		if err := json.Unmarshal(run.Input(), &in); err != nil {
			return worker.Result{}, err
		}
		var got []string
		for _, q := range in.Questions {
			out, err := run.Call(ctx, "ask", map[string]string{"q": q})
			var ce *worker.CallError
			switch {
			case errors.As(err, &ce):
				got = append(got, "error: "+ce.Message)
			case errors.Is(err, worker.ErrCallTimeout):
				got = append(got, "timeout")
			case err != nil:
				return worker.Result{}, err
			default:
				got = append(got, string(out))
			}
		}
		return worker.Result{Summary: "asked", Output: got}, nil
	}
}

// A run's calls reach the parent's call handler, which answers one and
// fails another: the run gets the answer and an error value, and goes on.
// While it waits the row shows the call.
func TestCallAnsweredAndFailed(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{RowSyncInterval: 50 * time.Millisecond}, map[string]worker.Handler{"asker": asker()})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	release := make(chan struct{})
	var calls atomic.Int32
	srv, err := c.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleFunc("ask", func(ctx context.Context, call *parent.Call) (any, error) {
		calls.Add(1)
		var in struct{ Q string }
		if err := json.Unmarshal(call.Input, &in); err != nil {
			return nil, err
		}
		if call.RunID != "a1" || call.AgentType != "asker" || call.Parent != "boss" {
			return nil, fmt.Errorf("unexpected call %+v", call)
		}
		if in.Q == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if in.Q == "fail" {
			return nil, errors.New("cannot answer that")
		}
		return map[string]string{"a": "answer to " + in.Q}, nil
	})
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "asker", RunID: "a1", Parent: "boss",
		Input: map[string]any{"questions": []string{"slow", "fail", "why"}}}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, b.store, "a1", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "call:ask" })
	close(release)
	row := jetruntest.WaitRow(t, b.store, "a1", 30*time.Second, jetruntest.Final)
	var out []string
	if err := json.Unmarshal(row.Output, &out); err != nil || row.Status != events.StatusCompleted {
		t.Fatalf("row %s %s %s", row.Status, row.Error, row.Output)
	}
	want := `[{"a":"answer to slow"} error: cannot answer that {"a":"answer to why"}]`
	if fmt.Sprint(out) != want {
		t.Fatalf("run got %v, want %s", out, want)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("call handler ran %d times, want 3", n)
	}
	states, err := c.Calls(ctx, "a1")
	if err != nil || len(states) != 3 {
		t.Fatalf("calls %+v %v", states, err)
	}
	for i, s := range states {
		if s.Call.Seq != int64(i+1) || s.Reply == nil || s.Reply.Seq != s.Call.Seq {
			t.Fatalf("call %d: %+v", i, s)
		}
	}
}

// A call handler's outcomes: an error marked with RetryAfter leaves the
// call unanswered and it is served again after the delay; one marked with
// Cancel is the answer, as a plain error is.
func TestCallHandlerRetriesAfterAndCancels(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{"asker": asker()})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := c.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int32
	srv.HandleFunc("ask", func(ctx context.Context, call *parent.Call) (any, error) {
		var in struct{ Q string }
		if err := json.Unmarshal(call.Input, &in); err != nil {
			return nil, err
		}
		if in.Q == "never" {
			return nil, jetruntype.Cancel(errors.New("no, never"))
		}
		if tries.Add(1) == 1 {
			return nil, jetruntype.RetryAfter(errors.New("not yet"), 100*time.Millisecond)
		}
		return "now", nil
	})
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-srv.Stopped()
	}()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "asker", RunID: "o1",
		Input: map[string]any{"questions": []string{"later", "never"}}}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, b.store, "o1", 30*time.Second, jetruntest.Final)
	if want := `["\"now\"","error: no, never"]`; row.Status != events.StatusCompleted || string(row.Output) != want {
		t.Fatalf("row %s %s %s, want output %s", row.Status, row.Error, row.Output, want)
	}
	if n := tries.Load(); n != 2 {
		t.Fatalf("the retried call was served %d times, want 2", n)
	}
}

// A call nobody answers times out (the run goes on); a cancel ends a wait.
func TestCallTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{RowSyncInterval: 50 * time.Millisecond}, map[string]worker.Handler{
		"impatient": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := run.Call(cctx, "nobody", 1)
			if !errors.Is(err, worker.ErrCallTimeout) {
				return worker.Result{}, fmt.Errorf("want a timeout, got %v", err)
			}
			return worker.Result{Summary: "gave up waiting"}, nil
		}),
		"patient": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			_, err := run.Call(ctx, "nobody", 1)
			return worker.Result{}, err
		}),
	})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Run(ctx, parent.Request{AgentType: "impatient", RunID: "i1", Input: 1})
	if err != nil || res.Summary != "gave up waiting" {
		t.Fatalf("impatient: %+v %v", res, err)
	}

	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "patient", RunID: "p1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, b.store, "p1", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "call:nobody" })
	if _, err := c.Cancel(ctx, "p1", "enough"); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, b.store, "p1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusAborted {
		t.Fatalf("p1 %s %s", row.Status, row.Error)
	}
}

// A call server stopped while its handler runs hands the call back; a
// server started later (a parent restarted mid-call) answers it, once.
func TestCallServerRestartedMidCall(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{"asker": asker()})
	c := newClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	started := make(chan struct{}, 1)
	first, err := c.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	first.HandleFunc("ask", func(ctx context.Context, call *parent.Call) (any, error) {
		started <- struct{}{}
		<-ctx.Done() // never answers: its process goes away
		return nil, ctx.Err()
	})
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "asker", RunID: "r1",
		Input: map[string]any{"questions": []string{"q"}}}); err != nil {
		t.Fatal(err)
	}
	<-started
	first.Stop()

	var answered atomic.Int32
	second, err := c.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	second.HandleFunc("ask", func(ctx context.Context, call *parent.Call) (any, error) {
		answered.Add(1)
		return "restarted answer", nil
	})
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	row := jetruntest.WaitRow(t, b.store, "r1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || string(row.Output) != `["\"restarted answer\""]` {
		t.Fatalf("row %s %s %s", row.Status, row.Error, row.Output)
	}
	if n := answered.Load(); n != 1 {
		t.Fatalf("second server answered %d times", n)
	}
	states, err := c.Calls(ctx, "r1")
	if err != nil || len(states) != 1 || states[0].Reply == nil {
		t.Fatalf("calls %+v %v", states, err)
	}
}

// The plain-NATS contract: any JetStream consumer of jetrun.run.*.call
// answers by publishing {"runId","seq","output"|"error"} to
// jetrun.run.<id>.reply.
func TestCallAnsweredOverPlainNATS(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{"asker": asker()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	publish(t, b.js, "jetrun.dispatch.asker", `{"runId":"plain","input":{"questions":["one","two"]}}`)

	cons, err := b.js.OrderedConsumer(ctx, "JETRUN_EVENTS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"jetrun.run.*.call"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var call struct {
			RunID string          `json:"runId"`
			Seq   int64           `json:"seq"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(m.Data(), &call); err != nil || m.Subject() != "jetrun.run.plain.call" || call.Name != "ask" {
			t.Fatalf("call %s %s (%v)", m.Subject(), m.Data(), err)
		}
		reply := fmt.Sprintf(`{"runId":"plain","seq":%d,"output":{"got":%s}}`, call.Seq, call.Input)
		if call.Seq == 2 {
			reply = `{"runId":"plain","seq":2,"error":"no second answers"}`
		}
		publish(t, b.js, "jetrun.run.plain.reply", reply, jetstream.WithMsgID(fmt.Sprintf("plain.reply.%d", call.Seq)))
	}
	row := jetruntest.WaitRow(t, b.store, "plain", 30*time.Second, jetruntest.Final)
	if string(row.Output) != `["{\"got\":{\"q\":\"one\"}}","error: no second answers"]` {
		t.Fatalf("row %s %s %s", row.Status, row.Error, row.Output)
	}
}
