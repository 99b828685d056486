package jetruncli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// jetrun dispatch --key --strategy: a second run under a busy key waits
// queued; a drop is refused with the reason.
func TestDispatchUnderAConcurrencyKey(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
	})
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())
	cli := func(args ...string) (string, int) {
		t.Helper()
		var out, errw bytes.Buffer
		code := jetruncli.Main(ctx, args, nil, &out, &errw)
		return out.String() + errw.String(), code
	}
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if out, code := cli("dispatch", "--run-id", "c0", "--key", "s1", "demo", `{"steps":100,"stepMs":100}`); code != jetruncli.ExitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	jetruntest.WaitRow(t, store, "c0", 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	out, code := cli("dispatch", "--run-id", "c1", "--key", "s1", "--strategy", "queue", "demo", `{"steps":1,"stepMs":0}`)
	if code != jetruncli.ExitOK || !strings.Contains(out, "queued") {
		t.Fatalf("exit %d: %s; want c1 queued", code, out)
	}
	out, code = cli("dispatch", "--run-id", "c2", "--key", "s1", "--strategy", "drop", "demo", `{"steps":1,"stepMs":0}`)
	if code == jetruncli.ExitOK || !strings.Contains(out, "busy") {
		t.Fatalf("drop while busy: exit %d: %s", code, out)
	}
	if out, code := cli("cancel", "c0"); code != jetruncli.ExitOK {
		t.Fatalf("cancel: exit %d: %s", code, out)
	}
	if r := jetruntest.WaitRow(t, store, "c1", 30*time.Second, jetruntest.Final); r.Status != events.StatusCompleted {
		t.Fatalf("c1 ended %s", r.Status)
	}
}
