package jetruncli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// jetrun agents lists the live agent types with their worker counts, and
// prints their tool definitions with --tools.
func TestAgentsCommand(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := agents.StartPool(ctx, rt, worker.Config{}, []string{"demo"}, agents.Configured{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())
	cli := func(args ...string) string {
		t.Helper()
		var out, errw bytes.Buffer
		if code := jetruncli.Main(ctx, args, nil, &out, &errw); code != jetruncli.ExitOK {
			t.Fatalf("jetrun %v: exit %d: %s", args, code, errw.String())
		}
		return out.String()
	}
	table := cli("agents")
	if !strings.Contains(table, "TYPE") || !strings.Contains(table, "demo") || !strings.Contains(table, "simulated researcher") {
		t.Fatalf("jetrun agents:\n%s", table)
	}
	var list []struct {
		AgentType string `json:"agentType"`
		Workers   int    `json:"workers"`
	}
	if err := json.Unmarshal([]byte(cli("agents", "--json")), &list); err != nil || len(list) != 1 || list[0].Workers != 1 {
		t.Fatalf("jetrun agents --json: %v %+v", err, list)
	}
	var tools []map[string]any
	if err := json.Unmarshal([]byte(cli("agents", "--tools", "anthropic")), &tools); err != nil || len(tools) != 1 || tools[0]["input_schema"] == nil {
		t.Fatalf("jetrun agents --tools anthropic: %v %+v", err, tools)
	}
	var out, errw bytes.Buffer
	if code := jetruncli.Main(ctx, []string{"agents", "--tools", "cobol"}, nil, &out, &errw); code != jetruncli.ExitUsage {
		t.Fatalf("unknown format: exit %d", code)
	}
	// The schema refuses a bad input as a usage error; onMilestones lands on the row.
	out.Reset()
	if code := jetruncli.Main(ctx, []string{"dispatch", "demo", `{"steps":"x"}`}, nil, &out, &errw); code != jetruncli.ExitUsage ||
		!strings.Contains(errw.String(), "does not match the schema") {
		t.Fatalf("bad input: exit %d: %s", code, errw.String())
	}
	cli("dispatch", "--run-id", "cli-ms", "--on-finish", "h", "--on-milestones", "step-1,step-2", "--json", "demo", `{"steps":1,"stepMs":0}`)
	var row struct {
		Detached struct{ OnMilestones []string }
	}
	if err := json.Unmarshal([]byte(cli("get", "--json", "cli-ms")), &row); err != nil || strings.Join(row.Detached.OnMilestones, ",") != "step-1,step-2" {
		t.Fatalf("row: %v %+v", err, row)
	}
}
