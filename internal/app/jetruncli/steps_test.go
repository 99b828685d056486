package jetruncli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// jetrun get lists a run's steps (name, when, size, attempt), its --json
// carries them, and jetrun replay and dispatch --wait show them as they
// come.
func TestGetAndReplayShowSteps(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("stepper", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if _, err := run.Step(ctx, "plan-1", func(context.Context) (any, error) { return "0123456789", nil }); err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: "done"}, nil
		})
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
	cli("dispatch", "--run-id", "g1", "stepper", `{}`)
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, store, "g1", 30*time.Second, jetruntest.Final)

	got := cli("get", "g1")
	if !regexp.MustCompile(`(?m)^steps\n  \d{4}-\d\d-\d\d [0-9:.]+  plan-1  12 B  .*attempt 1$`).MatchString(got) {
		t.Errorf("jetrun get g1:\n%s", got)
	}
	var tree struct {
		Steps []struct {
			Name    string `json:"name"`
			Bytes   int    `json:"bytes"`
			Attempt int    `json:"attempt"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(cli("get", "--json", "g1")), &tree); err != nil {
		t.Fatal(err)
	}
	if len(tree.Steps) != 1 || tree.Steps[0].Name != "plan-1" || tree.Steps[0].Bytes != 12 || tree.Steps[0].Attempt != 1 {
		t.Errorf("get --json steps = %+v", tree.Steps)
	}
	if got := cli("replay", "g1"); !strings.Contains(got, "step       plan-1  12 B") {
		t.Errorf("jetrun replay g1:\n%s", got)
	}
	if got := cli("dispatch", "--wait", "--run-id", "g2", "stepper", `{}`); !strings.Contains(got, "▣ step plan-1  12 B") {
		t.Errorf("jetrun dispatch --wait:\n%s", got)
	}
}
