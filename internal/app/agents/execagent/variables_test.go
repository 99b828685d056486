package execagent_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// pyVariablesChild is a Python child on the jetrun library (sdk/python): it
// reads its caller's variable "seen" and sets "found".
const pyVariablesChild = `
import sys
sys.path.insert(0, sys.argv[1])
import jetrun

def handle(run):
    seen = run.variables().get("seen")
    run.set_variable("found", "%s after %s" % (run.input["objective"], seen))
    return "ok"

jetrun.serve(handle)
`

// jsVariablesChild is the same child on the TypeScript library (sdk/js).
const jsVariablesChild = `
const { child } = await import(process.argv[1] + '/child.js');
await child(async (run) => {
  const seen = run.variables().seen;
  await run.setVariable('found', run.input.objective + ' after ' + seen);
  return { output: 'ok' };
});
`

// A Go parent's sub-agents on the Python and the TypeScript library: RunSubAgent passes the
// Go run's variables down, the child reads them with run.variables() and
// sets one (set_variable, setVariable), and the Go parent has it once the
// child completed (Run.Variables): the three write and read the same
// variable steps.
func TestGoParentTakesLibraryChildsVariables(t *testing.T) {
	t.Parallel()
	sdk, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "sdk"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	children := map[string]execagent.Config{
		"py-child": {Path: python(t), Args: []string{"-c", pyVariablesChild, filepath.Join(sdk, "python")}},
		"js-child": {Path: node, Args: []string{"--input-type=module", "-e", jsVariablesChild, filepath.Join(sdk, "js")}},
	}
	env := jetruntest.NewEnv(t)
	subs := worker.SubAgents{Delegates: []worker.Delegate{{AgentType: "py-child"}, {AgentType: "js-child"}}}
	env.StartWorker(t, worker.Config{Concurrency: 4}, func(w *worker.Worker) {
		for name, cfg := range children {
			w.Handle(name, execagent.Handler(cfg))
		}
		w.HandleFunc("go-parent", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var in struct{ Child string }
			if err := json.Unmarshal(run.Input(), &in); err != nil {
				return worker.Result{}, err
			}
			answer, err := run.RunSubAgent(ctx, subs, "c1", "task_"+in.Child, json.RawMessage(`{"objective":"tides"}`))
			if err != nil {
				return worker.Result{}, err
			}
			vars, err := run.Variables(ctx)
			if err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Output: map[string]any{"answer": answer, "variables": vars}}, nil
		})
	})
	for child := range children {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := env.Client.Run(ctx, parent.Request{AgentType: "go-parent", RunID: "gp-" + child,
			Input: map[string]any{"child": child, "variables": map[string]any{"seen": "moon"}}})
		if err != nil {
			t.Fatalf("%s: %v", child, err)
		}
		var out struct {
			Answer    string
			Variables map[string]string
		}
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatalf("%s: decode %s: %v", child, res.Output, err)
		}
		if out.Answer != "ok" || out.Variables["seen"] != "moon" || out.Variables["found"] != "tides after moon" || len(out.Variables) != 2 {
			t.Errorf("%s: answer %q, variables %v: want ok, seen=moon and found=\"tides after moon\" (set by the child)", child, out.Answer, out.Variables)
		}
	}
}
