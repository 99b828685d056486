package jetruncli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// jetrun rerun ID --from STEP starts a run that executes the steps from
// STEP only; jetrun get says where it was forked from; jetrun diff shows
// the two runs step by step; jetrun rerun --batch prints one table; a step
// the run never stored is a usage error naming the steps it has.
func TestRerunDiffAndBatchCommands(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	ran := map[string][]string{}
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("four", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var in struct{ Model string }
			_ = json.Unmarshal(run.Input(), &in)
			for n := 1; n <= 4; n++ {
				name := fmt.Sprintf("s%d", n)
				_, err := run.Step(ctx, name, func(ctx context.Context) (any, error) {
					mu.Lock()
					ran[run.ID()] = append(ran[run.ID()], name)
					mu.Unlock()
					return name + " by " + in.Model, run.Usage(ctx, worker.Usage{OutputTokens: 5, CostMicros: 50})
				})
				if err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{Output: in.Model}, nil
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
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cli(0, "dispatch", "--run-id", "c1", "four", `{"model":"m1"}`)
	jetruntest.WaitRow(t, store, "c1", 30*time.Second, jetruntest.Final)

	out, _ := cli(0, "rerun", "c1", "--from", "s3", "--input", `{"model":"m2"}`, "--run-id", "c1-m2")
	if out != "c1-m2 re-runs c1 from s3 (given s1, s2; starting)\n" {
		t.Errorf("jetrun rerun:\n%s", out)
	}
	jetruntest.WaitRow(t, store, "c1-m2", 30*time.Second, jetruntest.Final)
	mu.Lock()
	got := slices.Clone(ran["c1-m2"])
	mu.Unlock()
	if !slices.Equal(got, []string{"s3", "s4"}) {
		t.Errorf("re-run from s3 executed %v", got)
	}
	if out, _ := cli(0, "get", "c1-m2"); !strings.Contains(out, "forked from  c1 at step s3 (given s1, s2)") ||
		!regexp.MustCompile(`(?m)  s1  \d+ B .*given from c1$`).MatchString(out) {
		t.Errorf("jetrun get c1-m2:\n%s", out)
	}
	out, _ = cli(0, "diff", "c1", "c1-m2")
	for _, want := range []string{
		"s1      equal", "s2      equal", "s3      changed", "s4      changed",
		"given from c1", "total   2 equal, 2 changed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("jetrun diff lacks %q:\n%s", want, out)
		}
	}
	_, errw := cli(jetruncli.ExitUsage, "rerun", "c1", "--from", "s9")
	if !strings.Contains(errw, `no stored step "s9"; its steps: s1, s2, s3, s4`) {
		t.Errorf("rerun from a step never stored: %s", errw)
	}
	out, _ = cli(0, "rerun", "--batch", "--type", "four", "--from", "s4", "--set", `input.model="m3"`, "--max-runs", "1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !regexp.MustCompile(`completed\s+changed\s+s4\s`).MatchString(lines[1]) ||
		!strings.HasPrefix(lines[2], "total") {
		t.Errorf("jetrun rerun --batch:\n%s", out)
	}
	// A time range that holds none of the runs re-runs none.
	out, _ = cli(0, "rerun", "--batch", "--type", "four", "--from", "s4", "--since", "48h", "--until", "24h")
	if strings.Contains(out, "completed") {
		t.Errorf("jetrun rerun --batch --since 48h --until 24h re-ran runs created now:\n%s", out)
	}
	t.Logf("jetrun diff c1 c1-m2:\n%s", func() string { o, _ := cli(0, "diff", "c1", "c1-m2"); return o }())
}
