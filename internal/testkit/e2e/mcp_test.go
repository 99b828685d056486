package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

const mcpWriteToken = "mcp-write-token-0123456789"

// mcpStack is a nats-server (in the test), a child-worker serving demo and
// a parent-worker with tokens serving /mcp, both processes.
func mcpStack(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t)
	e.childWorker(t, "mcp-child", nil)
	_, url := mcpParentWorker(t, e, "mcp-parent")
	return e, url
}

// mcpParentWorker starts a parent-worker with a write token on e's
// nats-server and returns it and its /mcp URL.
func mcpParentWorker(t *testing.T, e *env, id string) (*proc, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_NATS_URL":    e.url,
		"JETRUN_WORKER_ID":   id,
		"JETRUN_HTTP_ADDR":   addr,
		"JETRUN_HTTP_TOKENS": "write=" + mcpWriteToken,
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	return pw, "http://" + addr + "/mcp"
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpConnect(t *testing.T, ctx context.Context, tr mcp.Transport, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "jetrun-e2e", Version: "1"}, opts).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("mcp connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// The Go SDK's client against a parent-worker and a child-worker: the demo
// agent listed as a tool, a call that reports progress and waits for an
// approval the test sends when the progress arrives, a failing call, a call
// cancelled by the client, and a call with arguments that break the schema.
func TestMCPGoClient(t *testing.T) {
	t.Parallel()
	e, url := mcpStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	progress := make(chan *mcp.ProgressNotificationParams, 64)
	cs := mcpConnect(t, ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{mcpWriteToken}}},
		&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params }})

	natstest.Eventually(t, 30*time.Second, func() bool {
		res, err := cs.ListTools(ctx, nil)
		return err == nil && len(res.Tools) == 1 && res.Tools[0].Name == "demo" && res.Tools[0].OutputSchema != nil
	}, "tools/list does not list demo with its output schema")

	// Progress, then the approval the run waits for, then the result.
	const key = "e2e-approve"
	id := parent.RunID("mcp", key)
	params := &mcp.CallToolParams{Name: "demo", Arguments: map[string]int{"steps": 3, "stepMs": 10, "approveAt": 2},
		Meta: mcp.Meta{mcpserver.MetaIdempotencyKey: key}}
	params.SetProgressToken(42)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, params)
		done <- answer{res, err}
	}()
	select {
	case p := <-progress:
		if p.Progress <= 0 || p.Total != 1 {
			t.Errorf("progress %+v; want a fraction of 1", p)
		}
	case a := <-done:
		t.Fatalf("answered before any progress: %+v %v", a.res, a.err)
	case <-ctx.Done():
		t.Fatal("no progress")
	}
	if _, err := e.client.Signal(ctx, id, "approve", map[string]bool{"approved": true}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.IsError {
		t.Fatalf("tools/call: %+v %v", a.res, a.err)
	}
	if out, _ := json.Marshal(a.res.StructuredContent); !strings.Contains(string(out), `"steps":3`) {
		t.Errorf("structuredContent %s; want the demo's output", out)
	}
	if text := a.res.Content[0].(*mcp.TextContent).Text; text != "finished 3 steps" {
		t.Errorf("text %q; want the summary", text)
	}

	// A failing run.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo", Arguments: map[string]int{"steps": 2, "stepMs": 1, "failAt": 1}})
	if err != nil || !res.IsError {
		t.Fatalf("failing run: %+v %v; want isError", res, err)
	}
	// demo has an output schema, which the failure would break: the
	// failure is in _meta only.
	if out, _ := json.Marshal(res.Meta[mcpserver.MetaFailure]); !strings.Contains(string(out), `"status":"error"`) || res.StructuredContent != nil {
		t.Errorf("_meta failure %s, structuredContent %v; want jetrun's failure in _meta only", out, res.StructuredContent)
	}

	// A call the client cancels: its run is aborted.
	const cancelKey = "e2e-cancel"
	cid := parent.RunID("mcp", cancelKey)
	callCtx, cancelCall := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "demo", Arguments: map[string]int{"steps": 2, "stepMs": 1, "approveAt": 1},
			Meta: mcp.Meta{mcpserver.MetaIdempotencyKey: cancelKey}})
		errc <- err
	}()
	jetruntest.WaitRow(t, e.store, cid, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor != "" })
	cancelCall()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled call answered")
	}
	if row := jetruntest.WaitRow(t, e.store, cid, 30*time.Second, jetruntest.Final); row.Status != events.StatusAborted {
		t.Errorf("cancelled call's run ended %s; want aborted", row.Status)
	}

	// Arguments that break the schema, an unknown tool, oversize arguments.
	for _, tc := range []struct {
		params *mcp.CallToolParams
		want   string
	}{
		{&mcp.CallToolParams{Name: "demo", Arguments: map[string]any{"steps": "three"}}, "/steps"},
		{&mcp.CallToolParams{Name: "no-such-tool", Arguments: map[string]any{}}, `unknown tool "no-such-tool"`},
		{&mcp.CallToolParams{Name: "demo", Arguments: map[string]any{"pad": strings.Repeat("x", mcpserver.MaxArgumentBytes)}}, "the limit is 262144"},
	} {
		_, err = cs.CallTool(ctx, tc.params)
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, tc.want) {
			t.Errorf("tools/call %s: %v; want invalid params saying %s", tc.params.Name, err, tc.want)
		}
	}
}

// The official TypeScript SDK as the client, in a node script.
func TestMCPTypeScriptClient(t *testing.T) {
	t.Parallel()
	node := interpreter(t, "node")
	dir := examples(t, "js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the MCP TypeScript SDK is not installed (make deps runs npm ci in examples/js): %v", err)
	}
	e, url := mcpStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const cancelKey = "ts-cancel"
	cmd := exec.CommandContext(ctx, node, "mcp-client.mjs", "--url", url, "--token", mcpWriteToken,
		"--tool", "demo", "--args", `{"steps":3,"stepMs":20}`, "--bad-args", `{"steps":"three"}`, "--checks",
		"--fail-args", `{"steps":2,"stepMs":1,"failAt":1}`,
		"--cancel-args", `{"steps":2,"stepMs":1,"approveAt":1}`, "--cancel-key", cancelKey)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node mcp-client.mjs: %v\n%s", err, out)
	}
	var tools, result, rpcErr map[string]any
	var progress []float64
	lines := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("output line %q: %v\n%s", sc.Text(), err, out)
		}
		lines[fmt.Sprint(line["what"])] = line
		switch line["what"] {
		case "tools":
			tools = line
		case "progress":
			progress = append(progress, line["progress"].(float64))
		case "result":
			result = line
		case "error":
			rpcErr = line
		}
	}
	if names, _ := json.Marshal(tools["names"]); string(names) != `["demo"]` {
		t.Errorf("tools %s; want [demo]\n%s", names, out)
	}
	if len(progress) == 0 || progress[len(progress)-1] != 1 {
		t.Errorf("progress %v; want some, ending at 1\n%s", progress, out)
	}
	if sc, _ := json.Marshal(result["structuredContent"]); result["isError"] == true || !strings.Contains(string(sc), `"steps":3`) {
		t.Errorf("result %v; want the demo's output\n%s", result, out)
	}
	if rpcErr["code"] != float64(jsonrpc.CodeInvalidParams) || !strings.Contains(fmt.Sprint(rpcErr["message"]), "/steps") {
		t.Errorf("bad arguments gave %v; want invalid params naming /steps\n%s", rpcErr, out)
	}
	for what, want := range map[string]string{"unknown-tool": `unknown tool "no-such-tool"`, "oversize": "the limit is 262144"} {
		if l := lines[what]; l["code"] != float64(jsonrpc.CodeInvalidParams) || !strings.Contains(fmt.Sprint(l["message"]), want) {
			t.Errorf("%s gave %v; want invalid params saying %s\n%s", what, l, want, out)
		}
	}
	// A failed run: the SDK accepts the isError result (its structured
	// content would have to match demo's output schema), the failure is in
	// _meta.
	if failed, _ := json.Marshal(lines["failed"]); lines["failed"]["isError"] != true || !strings.Contains(string(failed), `"io.jetrun/failure":{`) {
		t.Errorf("failed run gave %s; want isError with the failure in _meta\n%s", failed, out)
	}
	// The call aborted at its first progress: notifications/cancelled
	// cancelled its run.
	if lines["cancelled"] == nil {
		t.Errorf("the aborted call did not end cancelled\n%s", out)
	}
	if again, _ := json.Marshal(lines["cancelled-run"]); !strings.Contains(string(again), `"status":"aborted"`) {
		t.Errorf("calling again with the key gave %s; want the run aborted\n%s", again, out)
	}
	if row := jetruntest.WaitRow(t, e.store, parent.RunID("mcp", cancelKey), 30*time.Second, jetruntest.Final); row.Status != events.StatusAborted {
		t.Errorf("the aborted call's run ended %s; want aborted", row.Status)
	}
}

// The official TypeScript SDK's tasks (the 2025-11-25 experimental form):
// a tool called as a task, its status notifications, the run's approval
// asked as an elicitation during tasks/result and answered, the result,
// tasks/list, tasks/cancel, and an unknown task.
func TestMCPTypeScriptTasks(t *testing.T) {
	t.Parallel()
	node := interpreter(t, "node")
	dir := examples(t, "js")
	e, url := mcpStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "mcp-tasks.mjs", "--url", url, "--token", mcpWriteToken,
		"--tool", "demo", "--args", `{"steps":3,"stepMs":20,"approveAt":2}`, "--answer", `{"approved":true}`)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node mcp-tasks.mjs: %v\n%s", err, out)
	}
	type line struct {
		What, TaskID, Status string
		Tools                []struct{ Execution map[string]string }
		Meta                 map[string]json.RawMessage `json:"_meta"`
		StructuredContent    json.RawMessage
		Tasks                []struct{ TaskID string }
		Code                 int
	}
	var created, result, cancelled, unknown *line
	statuses := map[string]bool{}
	var elicited []line
	var toolsLine *line
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	var listed []string
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("output line %q: %v\n%s", sc.Text(), err, out)
		}
		switch l.What {
		case "tools":
			toolsLine = &l
		case "taskCreated":
			created = &l
		case "task-status":
			if created != nil && l.TaskID == created.TaskID {
				statuses[l.Status] = true
			}
		case "elicitation":
			elicited = append(elicited, l)
		case "result":
			result = &l
		case "tasks":
			for _, tk := range l.Tasks {
				listed = append(listed, tk.TaskID)
			}
		case "cancel":
			cancelled = &l
		case "unknown-task":
			unknown = &l
		}
	}
	if toolsLine == nil || len(toolsLine.Tools) != 1 || toolsLine.Tools[0].Execution["taskSupport"] != "optional" {
		t.Errorf("tools/list: %+v; want demo with execution.taskSupport optional\n%s", toolsLine, out)
	}
	if created == nil || created.TaskID == "" {
		t.Fatalf("no task created\n%s", out)
	}
	if !statuses["input_required"] || !statuses["completed"] {
		t.Errorf("notifications/tasks/status of the task: %v; want input_required and completed\n%s", statuses, out)
	}
	if len(elicited) != 1 || !strings.Contains(string(elicited[0].Meta["io.modelcontextprotocol/related-task"]), created.TaskID) {
		t.Errorf("elicitations %+v; want one, related to the task\n%s", elicited, out)
	}
	if result == nil || !strings.Contains(string(result.StructuredContent), `"steps":3`) {
		t.Errorf("result %+v; want the demo's output\n%s", result, out)
	}
	if len(listed) != 1 || listed[0] != created.TaskID {
		t.Errorf("tasks/list %v; want [%s]\n%s", listed, created.TaskID, out)
	}
	if unknown == nil || unknown.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("tasks/get of an unknown task: %+v; want invalid params\n%s", unknown, out)
	}
	if cancelled == nil || cancelled.TaskID == "" {
		t.Fatalf("no task cancelled\n%s", out)
	}
	if row := jetruntest.WaitRow(t, e.store, cancelled.TaskID, 30*time.Second, jetruntest.Final); row.Status != events.StatusAborted {
		t.Errorf("the cancelled task's run ended %s; want aborted", row.Status)
	}
}

// jetrun mcp: a stdio server a host launches.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "mcp-stdio-child", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(filepath.Join(bin, "jetrun"), "mcp")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "JETRUN_NATS_URL=" + e.url}
	cs := mcpConnect(t, ctx, &mcp.CommandTransport{Command: cmd}, nil)
	natstest.Eventually(t, 30*time.Second, func() bool {
		res, err := cs.ListTools(ctx, nil)
		return err == nil && len(res.Tools) == 1 && res.Tools[0].Name == "demo"
	}, "tools/list over stdio does not list demo")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo", Arguments: map[string]int{"steps": 2, "stepMs": 1}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call over stdio: %+v %v", res, err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "finished 2 steps" {
		t.Errorf("text %q; want the summary", text)
	}
}

// The README's recipe with the MCP inspector's CLI works against a
// parent-worker started the way make run starts it.
func TestReadmeMCPInspectorRecipe(t *testing.T) {
	t.Parallel()
	dir := examples(t, "js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector")); err != nil {
		t.Fatalf("the MCP inspector is not installed (make deps runs npm ci in examples/js): %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN": "demo", "JETRUN_HTTP_ADDR": addr, "JETRUN_EMBEDDED_PORT": "-1", "JETRUN_DATA_DIR": t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	cmds := readmeCommands(t, "Try it with the MCP inspector's CLI", "## Configuration", "npx @modelcontextprotocol/inspector ", 2)
	wants := []string{`"name": "demo"`, `"text": "finished 3 steps"`}
	for i, c := range cmds {
		c = strings.ReplaceAll(c, "http://127.0.0.1:8080", "http://"+addr)
		cmd := exec.Command("sh", "-c", c)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "npm_config_offline=true"}
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
		if i < len(wants) && !strings.Contains(string(out), wants[i]) {
			t.Errorf("%s printed no %s:\n%s", c, wants[i], out)
		}
	}
}

// A client retrying a call with the same idempotency key re-attaches to its
// run, through another parent-worker after the first was killed with
// kill -9 in the middle of the call (sessionless, protocol 2026-07-28): the
// run goes on, is answered once, and runs once.
func TestMCPRetryReattachesThroughAnotherParentWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "mcp-retry-child", nil)
	pwA, urlA := mcpParentWorker(t, e, "mcp-retry-a")
	_, urlB := mcpParentWorker(t, e, "mcp-retry-b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	transport := func(url string) mcp.Transport {
		return &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{mcpWriteToken}}, MaxRetries: 1}
	}
	const key = "e2e-retry"
	id := parent.RunID("mcp", key)
	params := &mcp.CallToolParams{Name: "demo", Arguments: map[string]int{"steps": 3, "stepMs": 10, "approveAt": 2},
		Meta: mcp.Meta{mcpserver.MetaIdempotencyKey: key}}

	csA := mcpConnect(t, ctx, transport(urlA), nil)
	if v := csA.InitializeResult().ProtocolVersion; v != mcpserver.SessionlessRevision {
		t.Fatalf("negotiated %s; want %s", v, mcpserver.SessionlessRevision)
	}
	first := make(chan error, 1)
	callCtx, cancelFirst := context.WithCancel(ctx)
	defer func() { cancelFirst(); <-first }()
	go func() {
		_, err := csA.CallTool(callCtx, params)
		first <- err
	}()
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor != "" })
	pwA.kill() // kill -9 in the middle of the call

	csB := mcpConnect(t, ctx, transport(urlB), nil)
	second := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := csB.CallTool(ctx, params)
		if err != nil {
			t.Errorf("retried call through another parent-worker: %v", err)
		}
		second <- res
	}()
	if _, err := e.client.Signal(ctx, id, "approve", map[string]bool{"approved": true}); err != nil {
		t.Fatal(err)
	}
	res := <-second
	if res == nil || res.IsError || res.Meta[mcpserver.MetaRunID] != id {
		t.Fatalf("retried call: %+v; want the run %s completed", res, id)
	}
	if out, _ := json.Marshal(res.StructuredContent); string(out) != `{"attempt":1,"steps":3,"stepsRunHere":3}` {
		t.Errorf("output %s; want the one run, attempt 1, every step run once", out)
	}
	if row := jetruntest.WaitRow(t, e.store, id, 30*time.Second, jetruntest.Final); row.Status != events.StatusCompleted || row.Attempt != 1 {
		t.Errorf("run %s attempt %d; want completed at attempt 1", row.Status, row.Attempt)
	}
}

// Stopping a parent-worker (SIGTERM) with a sessionless call in flight ends
// the call, not its run: in protocol 2026-07-28 a request that ends is a
// cancel, and a shutdown must not look like one.
func TestMCPShutdownLeavesTheRunRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "mcp-stop-child", nil)
	pw, url := mcpParentWorker(t, e, "mcp-stop-parent")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := mcpConnect(t, ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{mcpWriteToken}}, MaxRetries: 1}, nil)
	const key = "e2e-stop"
	id := parent.RunID("mcp", key)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo", Arguments: map[string]int{"steps": 2, "stepMs": 1, "approveAt": 1},
			Meta: mcp.Meta{mcpserver.MetaIdempotencyKey: key}})
		done <- err
	}()
	jetruntest.WaitRow(t, e.store, id, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor != "" })
	pw.signal(syscall.SIGTERM)
	// Its exit status is not the point: a connection the client opens as
	// the call fails can hold http.Server.Shutdown past parent-worker's 5 s
	// (net/http counts a new connection as active for 5 s), and it then
	// exits 1.
	if err := pw.wait(30 * time.Second); err != nil {
		t.Logf("parent-worker exit: %v", err)
	}
	if err := <-done; err == nil {
		t.Error("the call answered although its parent-worker stopped")
	}
	row, err := e.client.Inspect(ctx, id)
	if err != nil || row == nil || row.Status != events.StatusRunning || row.CancelRequested {
		t.Fatalf("after the parent-worker stopped the run is %+v (%v); want running, no cancel", row, err)
	}
}
