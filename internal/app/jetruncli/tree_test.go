package jetruncli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// jetrun get shows a run's nested runs grouped by tool call and ordered by
// display order, and its calls.
func TestGetShowsTheRunTreeAndCalls(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
		w.HandleFunc("fanout", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var kids []*worker.Child
			for _, spec := range []struct {
				call  string
				order int
			}{{"call-x", 2}, {"call-y", 0}, {"call-x", 1}} {
				ch, err := run.Spawn(ctx, worker.ChildRequest{AgentType: demo.AgentType, CallID: spec.call,
					DisplayOrder: spec.order, Input: map[string]int{"steps": 1, "stepMs": 0}})
				if err != nil {
					return worker.Result{}, err
				}
				kids = append(kids, ch)
			}
			for _, ch := range kids {
				if _, err := ch.Await(ctx); err != nil {
					return worker.Result{}, err
				}
			}
			if _, err := run.Call(ctx, "ask", "ok?"); err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: "fanned out"}, nil
		})
	})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := client.NewCallServer(parent.CallServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleFunc("ask", func(context.Context, *parent.Call) (any, error) { return "yes", nil })
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if _, err := client.Run(ctx, parent.Request{AgentType: "fanout", RunID: "fan", Input: 1}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())
	cli := func(args ...string) string {
		t.Helper()
		var out, errw bytes.Buffer
		if code := jetruncli.Main(ctx, args, nil, &out, &errw); code != jetruncli.ExitOK {
			t.Fatalf("jetrun %v: exit %d: %s", args, code, errw.String())
		}
		return out.String()
	}
	x1, x2 := parent.RunID("fan", "call-x#1"), parent.RunID("fan", "call-x#2")
	y := parent.RunID("fan", "call-y")
	for _, id := range []string{x1, x2, y} {
		jetruntest.WaitRow(t, engine.From(rt).Store(), id, 30*time.Second, jetruntest.Final)
	}

	var tree struct {
		ID       string `json:"id"`
		Children []struct {
			ID               string `json:"id"`
			ParentToolCallID string `json:"parentToolCallId"`
			DisplayOrder     int    `json:"displayOrder"`
		} `json:"children"`
		Calls []struct {
			Call  struct{ Name string }    `json:"call"`
			Reply *struct{ Output string } `json:"reply"`
		} `json:"calls"`
	}
	if err := json.Unmarshal([]byte(cli("get", "--json", "fan")), &tree); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range tree.Children {
		got = append(got, fmt.Sprintf("%s/%d=%s", ch.ParentToolCallID, ch.DisplayOrder, ch.ID))
	}
	want := []string{"call-x/1=" + x1, "call-x/2=" + x2, "call-y/0=" + y}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("children %v, want %v", got, want)
	}
	if len(tree.Calls) != 1 || tree.Calls[0].Call.Name != "ask" || tree.Calls[0].Reply == nil {
		t.Fatalf("calls %+v", tree.Calls)
	}

	text := cli("get", "fan")
	for _, s := range []string{"children\n  call-x\n    " + x1, "    " + x2, "  call-y\n    " + y, "calls\n  1  ask  answered"} {
		if !strings.Contains(text, s) {
			t.Fatalf("jetrun get lacks %q:\n%s", s, text)
		}
	}
	var row model.Row
	if err := json.Unmarshal([]byte(cli("get", "--json", x1)), &row); err != nil || row.Parent != "fan" || row.Depth != 1 {
		t.Fatalf("child row %+v %v", row, err)
	}
}

// jetrun reply answers a run's pending call, once.
func TestReplyAnswersACall(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("asks", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			out, err := run.Call(ctx, "ask", "ok?")
			if err != nil {
				return worker.Result{}, err
			}
			_, err = run.Call(ctx, "ask", "really?")
			var ce *worker.CallError
			if !errors.As(err, &ce) {
				return worker.Result{}, fmt.Errorf("want a call error, got %v", err)
			}
			return worker.Result{Summary: ce.Message, Output: out}, nil
		})
	})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "asks", RunID: "q1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())
	jetrun := func(args ...string) (int, string) {
		var out, errw bytes.Buffer
		code := jetruncli.Main(ctx, args, nil, &out, &errw)
		return code, out.String() + errw.String()
	}
	waitCall := func(seq int64) {
		natstest.Eventually(t, 30*time.Second, func() bool {
			calls, err := client.Calls(ctx, "q1")
			return err == nil && len(calls) == int(seq) && calls[seq-1].Reply == nil
		}, "run q1 never made call %d", seq)
	}
	waitCall(1)
	if code, out := jetrun("reply", "q1", "1", `{"yes":true}`); code != jetruncli.ExitOK || !strings.Contains(out, "call 1 (ask) of q1 answered") {
		t.Fatalf("jetrun reply: %d %s", code, out)
	}
	if code, out := jetrun("reply", "q1", "1", `"again"`); code == jetruncli.ExitOK || !strings.Contains(out, "answered already") {
		t.Fatalf("second jetrun reply: %d %s", code, out)
	}
	waitCall(2)
	if code, out := jetrun("reply", "--error", "no", "q1", "2"); code != jetruncli.ExitOK {
		t.Fatalf("jetrun reply --error: %d %s", code, out)
	}
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "q1", 30*time.Second, jetruntest.Final)
	if row.Summary != "no" || string(row.Output) != `{"yes":true}` {
		t.Fatalf("row %s %q %s", row.Status, row.Summary, row.Output)
	}
	if code, out := jetrun("reply", "q1", "2", `1`); code == jetruncli.ExitOK || !strings.Contains(out, "has ended") {
		t.Fatalf("reply to an ended run: %d %s", code, out)
	}
}
