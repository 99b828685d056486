package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Two workers serve the built-in demo type, announced with its schemas:
// GET /v1/agents lists it with both, GET /v1/tools turns it into tool
// definitions, and POST /v1/runs refuses an input that does not match.
func TestAgentsToolsAndSchemaErrors(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx := context.Background()
	for _, id := range []string{"wa", "wb"} {
		w, err := agents.StartPool(ctx, rt, worker.Config{ID: id}, []string{"demo"}, agents.Configured{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop() })
	}
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	view, err := runview.Start(ctx, rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Stop)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Client: client, View: view, Conn: nc}))
	t.Cleanup(srv.Close)

	var list struct {
		Agents []struct {
			AgentType    string          `json:"agentType"`
			Description  string          `json:"description"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
			Workers      int             `json:"workers"`
		} `json:"agents"`
	}
	wantStatus(t, do(t, "GET", srv.URL+"/v1/agents", "", &list), 200)
	if len(list.Agents) != 1 || list.Agents[0].AgentType != "demo" || list.Agents[0].Workers != 2 ||
		!strings.Contains(string(list.Agents[0].InputSchema), `"stepMs"`) || len(list.Agents[0].OutputSchema) == 0 ||
		list.Agents[0].Description == "" {
		t.Fatalf("agents: %+v", list)
	}

	var openai []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"function"`
	}
	wantStatus(t, do(t, "GET", srv.URL+"/v1/tools?format=openai", "", &openai), 200)
	if len(openai) != 1 || openai[0].Type != "function" || openai[0].Function.Name != "demo" || openai[0].Function.Parameters["type"] != "object" {
		t.Fatalf("openai tools: %+v", openai)
	}
	var anthropic []map[string]any
	wantStatus(t, do(t, "GET", srv.URL+"/v1/tools?format=anthropic", "", &anthropic), 200)
	if len(anthropic) != 1 || anthropic[0]["name"] != "demo" || anthropic[0]["input_schema"] == nil {
		t.Fatalf("anthropic tools: %+v", anthropic)
	}
	var mcp struct {
		Tools []map[string]any `json:"tools"`
	}
	wantStatus(t, do(t, "GET", srv.URL+"/v1/tools?format=mcp", "", &mcp), 200)
	if len(mcp.Tools) != 1 || mcp.Tools[0]["inputSchema"] == nil || mcp.Tools[0]["outputSchema"] == nil {
		t.Fatalf("mcp tools: %+v", mcp)
	}
	var bad struct{ Error, Code string }
	wantStatus(t, do(t, "GET", srv.URL+"/v1/tools?format=cobol", "", &bad), 400)

	// A dispatch whose input does not match the schema: 400 with the error.
	wantStatus(t, do(t, "POST", srv.URL+"/v1/runs", `{"agentType":"demo","runId":"h-bad","input":{"steps":"five"}}`, &bad), 400)
	if !strings.Contains(bad.Error, "does not match the schema") || !strings.Contains(bad.Error, "/steps") {
		t.Fatalf("schema error: %+v", bad)
	}
	wantStatus(t, do(t, "GET", srv.URL+"/v1/runs/h-bad", "", nil), 404)
	var ok map[string]any
	wantStatus(t, do(t, "POST", srv.URL+"/v1/runs?wait=true", `{"agentType":"demo","runId":"h-good","input":{"steps":1,"stepMs":0}}`, &ok), 200)
	if ok["ok"] != true {
		t.Fatalf("good run: %v", ok)
	}
}
