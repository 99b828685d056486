package jetruncli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jetrun dispatch --tool-call-id records the parent's tool call; jetrun ls
// --tool-call-id lists the runs of that one tool call.
func TestListByToolCall(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.Handle(demo.AgentType, demo.Handler())
	})
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())

	cli := func(args ...string) string {
		t.Helper()
		var out, errw bytes.Buffer
		if code := jetruncli.Main(ctx, args, nil, &out, &errw); code != jetruncli.ExitOK {
			t.Fatalf("jetrun %v: exit %d: %s", args, code, errw.String())
		}
		return out.String()
	}
	for i, call := range []string{"call-a", "call-b", "call-a"} {
		id := []string{"t0", "t1", "t2"}[i]
		cli("dispatch", "--run-id", id, "--tool-call-id", call, "demo", `{"steps":1,"stepMs":0}`)
	}
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t0", "t1", "t2"} {
		jetruntest.WaitRow(t, store, id, 30*time.Second, jetruntest.Final)
	}
	var rows []model.Row
	if err := json.Unmarshal([]byte(cli("ls", "--json", "--tool-call-id", "call-a")), &rows); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		if r.ParentToolCallID != "call-a" {
			t.Fatalf("ls strays: %+v", r)
		}
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"t0", "t2"}) {
		t.Fatalf("ls --tool-call-id call-a: %v", ids)
	}
}
