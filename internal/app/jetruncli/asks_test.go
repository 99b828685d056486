package jetruncli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// jetrun asks lists the asks of waiting runs; jetrun answer answers one
// (a value breaking its kind is a usage error naming the field; a second
// answer fails naming the first answerer); jetrun reply answers a call
// that is an ask through the ask, so the inbox shows it answered.
func TestAsksAndAnswer(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
		w.HandleFunc("caller", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			out, err := run.Call(ctx, "pick", "which?", worker.Ask{Kind: events.AskChoose, Choices: []string{"a", "b"}})
			return worker.Result{Output: out}, err
		})
	})
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())
	cli := func(want int, args ...string) (string, string) {
		t.Helper()
		var out, errw bytes.Buffer
		if code := jetruncli.Main(ctx, args, nil, &out, &errw); code != want {
			t.Fatalf("jetrun %v: exit %d, want %d: %s%s", args, code, want, out.String(), errw.String())
		}
		return out.String(), errw.String()
	}
	listed := func(args ...string) []events.Ask {
		t.Helper()
		var l struct {
			Asks []events.Ask `json:"asks"`
		}
		out, _ := cli(jetruncli.ExitOK, append([]string{"asks", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatal(err)
		}
		return l.Asks
	}
	cli(jetruncli.ExitOK, "dispatch", "--run-id", "d1", "demo", `{"steps":2,"stepMs":0,"approveAt":2}`)
	cli(jetruncli.ExitOK, "dispatch", "--run-id", "c1", "caller", `{}`)
	var open []events.Ask
	natstest.Eventually(t, 30*time.Second, func() bool { open = listed(); return len(open) == 2 }, "two open asks not listed")
	if out, _ := cli(jetruncli.ExitOK, "asks", "--type", "demo"); !strings.Contains(out, "d1.s.approve.0") || strings.Contains(out, "c1.c.1") {
		t.Fatalf("jetrun asks --type demo:\n%s", out)
	}

	_, errw := cli(jetruncli.ExitUsage, "answer", "d1.s.approve.0", "--value", `{"approved":"yes"}`)
	if !strings.Contains(errw, "/approved") {
		t.Fatalf("a bad value: %s; want the field named", errw)
	}
	if out, _ := cli(jetruncli.ExitOK, "answer", "d1.s.approve.0", "--value", `{"approved":true}`, "--by", "carol"); !strings.Contains(out, "answered by carol") {
		t.Fatalf("jetrun answer: %s", out)
	}
	if _, errw := cli(jetruncli.ExitFailure, "answer", "d1.s.approve.0", "--value", `{"approved":false}`, "--by", "dave"); !strings.Contains(errw, "answered by carol") {
		t.Fatalf("a second answer: %s; want it to name carol", errw)
	}
	cli(jetruncli.ExitOK, "reply", "c1", "1", `{"choice":"b"}`)
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "c1"} {
		if row := jetruntest.WaitRow(t, store, id, 30*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
			t.Fatalf("run %s: %s %s", id, row.Status, row.Error)
		}
	}
	a := listed("--status", "answered", "--run", "c1")
	if len(a) != 1 || a[0].Answer == nil || !strings.Contains(string(a[0].Answer.Value), `"b"`) {
		t.Fatalf("the call's ask after jetrun reply: %+v", a)
	}
	if _, errw := cli(jetruncli.ExitFailure, "answer", "c1.c.1", "--value", `{"choice":"a"}`); !strings.Contains(errw, "answered by") {
		t.Fatalf("answer after reply: %s", errw)
	}
}
