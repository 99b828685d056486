package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// rawMCP speaks MCP's JSON-RPC over streamable HTTP by hand, so the tests
// see the tasks extension's messages as they are on the wire (the Go SDK
// v1.8.0 has no tasks).
type rawMCP struct {
	t           *testing.T
	url         string
	session     string
	id          int
	sessionless bool // protocol 2026-07-28: no session, the _meta triple on every request
}

type rpcError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// newRawMCP opens a session (initialize, notifications/initialized).
func newRawMCP(t *testing.T, url string) *rawMCP {
	t.Helper()
	c := &rawMCP{t: t, url: url}
	if _, rerr := c.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]string{"name": "jetrun-e2e-raw", "version": "1"}}); rerr != nil {
		t.Fatalf("initialize: %+v", rerr)
	}
	c.post(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, c.url, nil)
		c.headers(req)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	})
	return c
}

// newSessionlessMCP speaks protocol 2026-07-28: no session, every request
// says who it is.
func newSessionlessMCP(t *testing.T, url string) *rawMCP {
	return &rawMCP{t: t, url: url, sessionless: true}
}

func (c *rawMCP) headers(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+mcpWriteToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.sessionless {
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	}
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
}

// post sends one message and returns the response body's messages.
func (c *rawMCP) post(msg any) []json.RawMessage {
	c.t.Helper()
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	c.headers(req)
	if c.sessionless { // the routing headers: the method, and the tool or task it names
		var m struct {
			Method string
			Params struct{ Name, TaskID string }
		}
		_ = json.Unmarshal(body, &m)
		req.Header.Set("Mcp-Method", m.Method)
		if name := m.Params.Name + m.Params.TaskID; name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", c.url, err)
	}
	defer resp.Body.Close()
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		c.session = s
	}
	data, _ := io.ReadAll(resp.Body)
	// Sessionless, a JSON-RPC error also comes with an HTTP error status.
	if resp.StatusCode/100 != 2 && !(c.sessionless && json.Valid(data)) {
		c.t.Fatalf("POST %s: %s: %s", c.url, resp.Status, data)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if len(bytes.TrimSpace(data)) == 0 {
			return nil
		}
		return []json.RawMessage{data}
	}
	var out []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			out = append(out, json.RawMessage(strings.TrimSpace(line)))
		}
	}
	return out
}

// call sends a request and returns its result or error.
func (c *rawMCP) call(method string, params any) (json.RawMessage, *rpcError) {
	c.t.Helper()
	c.id++
	if c.sessionless || strings.HasPrefix(method, "tasks/") {
		// Every tasks request declares the extension (else a session gets
		// the 2025-11-25 form); sessionless, every request says who it is.
		var p map[string]any
		raw, _ := json.Marshal(params)
		_ = json.Unmarshal(raw, &p)
		meta, _ := p["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		if c.sessionless {
			meta["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
			meta["io.modelcontextprotocol/clientInfo"] = map[string]string{"name": "jetrun-e2e-raw", "version": "1"}
		}
		if _, ok := meta["io.modelcontextprotocol/clientCapabilities"]; !ok {
			meta["io.modelcontextprotocol/clientCapabilities"] = map[string]any{
				"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}
		}
		p["_meta"] = meta
		params = p
	}
	for _, m := range c.post(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params}) {
		var resp struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *rpcError       `json:"error"`
		}
		if json.Unmarshal(m, &resp) == nil && resp.ID != nil && *resp.ID == c.id {
			return resp.Result, resp.Error
		}
	}
	c.t.Fatalf("%s: no response", method)
	return nil, nil
}

// taskWire is a task as the tests read it.
type taskWire struct {
	ResultType    string                     `json:"resultType"`
	TaskID        string                     `json:"taskId"`
	Status        string                     `json:"status"`
	StatusMessage string                     `json:"statusMessage"`
	CreatedAt     string                     `json:"createdAt"`
	TTLMs         *int64                     `json:"ttlMs"`
	InputRequests map[string]json.RawMessage `json:"inputRequests"`
	Result        *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
}

func (c *rawMCP) mustTask(method string, params any) taskWire {
	c.t.Helper()
	res, rerr := c.call(method, params)
	if rerr != nil {
		c.t.Fatalf("%s: %+v", method, rerr)
	}
	var tw taskWire
	if err := json.Unmarshal(res, &tw); err != nil {
		c.t.Fatalf("%s: %v: %s", method, err, res)
	}
	return tw
}

// startTask makes a task-augmented tools/call.
func (c *rawMCP) startTask(tool string, args any) taskWire {
	c.t.Helper()
	tw := c.mustTask("tools/call", map[string]any{"name": tool, "arguments": args, "_meta": map[string]any{
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
	}})
	if tw.ResultType != "task" || tw.TaskID == "" || tw.CreatedAt == "" {
		c.t.Fatalf("tools/call with the tasks extension: %+v; want a task", tw)
	}
	return tw
}

// pollTask polls tasks/get until cond holds.
func (c *rawMCP) pollTask(id string, what string, cond func(taskWire) bool) taskWire {
	c.t.Helper()
	var last taskWire
	natstest.Eventually(c.t, 60*time.Second, func() bool {
		last = c.mustTask("tasks/get", map[string]string{"taskId": id})
		return cond(last)
	}, "task %s never %s; last %+v", id, what, &last)
	return last
}

// A task started through one parent-worker outlives it: that process is
// killed with kill -9, and another one answers tasks/get, takes the input
// the task waits for (the demo's approval signal) through tasks/update,
// polls it to its result, and cancels a second task. The first
// parent-worker is asked in a 2025-11-25 session, the second sessionless
// (2026-07-28) and in a session of its own, whose tasks/list lists the
// tasks the dead one's session created. A task's ttl is the run's
// retention (JETRUN_RETENTION's default, 7 days).
func TestMCPTasksSurviveTheirParentWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "tasks-child", nil)
	pwA, urlA := mcpParentWorker(t, e, "tasks-parent-a")
	a := newRawMCP(t, urlA)
	natstest.Eventually(t, 30*time.Second, func() bool {
		res, _ := a.call("tools/list", map[string]any{})
		return strings.Contains(string(res), `"demo"`)
	}, "demo is not listed")
	approve := a.startTask("demo", map[string]int{"steps": 3, "stepMs": 10, "approveAt": 2})
	doomed := a.startTask("demo", map[string]int{"steps": 2, "stepMs": 10, "approveAt": 1})
	pwA.kill() // kill -9

	_, urlB := mcpParentWorker(t, e, "tasks-parent-b")
	b := newSessionlessMCP(t, urlB) // and the other replica is asked without a session
	waiting := b.pollTask(approve.TaskID, "input_required", func(tw taskWire) bool { return tw.Status == "input_required" })
	const key = "signal:approve:0"
	req, ok := waiting.InputRequests[key]
	if !ok || !strings.Contains(string(req), `"elicitation/create"`) || !strings.Contains(string(req), `"approve"`) {
		t.Fatalf("inputRequests %v; want %s, an elicitation naming the signal approve", waiting.InputRequests, key)
	}
	if week := (7 * 24 * time.Hour).Milliseconds(); waiting.TTLMs == nil || *waiting.TTLMs != week {
		t.Errorf("ttlMs %v; want %d, the default retention", waiting.TTLMs, week)
	}
	var listed struct{ Tasks []struct{ TaskID string } }
	if raw, rerr := newRawMCP(t, urlB).call("tasks/list", map[string]any{}); rerr != nil || json.Unmarshal(raw, &listed) != nil ||
		len(listed.Tasks) != 2 || listed.Tasks[0].TaskID != doomed.TaskID || listed.Tasks[1].TaskID != approve.TaskID {
		t.Errorf("tasks/list in a session of the other parent-worker: %s %+v; want [%s %s]", raw, rerr, doomed.TaskID, approve.TaskID)
	}
	// A listen on the other replica follows the task to its end.
	listened := make(chan []json.RawMessage, 1)
	go func() {
		listened <- b.post(map[string]any{"jsonrpc": "2.0", "id": 900, "method": "subscriptions/listen", "params": map[string]any{
			"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
				"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "jetrun-e2e-raw", "version": "1"},
				"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}},
			"notifications": map[string]any{"taskIds": []string{approve.TaskID}}}})
	}()
	if res, rerr := b.call("tasks/update", map[string]any{"taskId": approve.TaskID, "inputResponses": map[string]any{
		key: map[string]any{"action": "accept", "content": map[string]bool{"approved": true}}}}); rerr != nil {
		t.Fatalf("tasks/update: %+v %s", rerr, res)
	}
	done := b.pollTask(approve.TaskID, "completed", func(tw taskWire) bool { return tw.Status == "completed" })
	if done.Result == nil || done.Result.IsError || !strings.Contains(string(done.Result.StructuredContent), `"steps":3`) {
		t.Fatalf("completed task %+v; want the demo's output", done)
	}
	// The response answered the run's ask, the one the inbox lists.
	st, err := asks.Open(context.Background(), e.js, wire.Namespace(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	if ask, _, err := st.Get(context.Background(), asks.SignalID(approve.TaskID, "approve", 0)); err != nil ||
		ask.Status != events.AskAnswered || ask.Answer.By != "mcp client" {
		t.Fatalf("the task's ask after tasks/update: %+v %v; want it answered by the mcp client", ask, err)
	}

	var completed bool
	msgs := <-listened
	for _, m := range msgs {
		completed = completed || (strings.Contains(string(m), `"notifications/tasks"`) && strings.Contains(string(m), `"status":"completed"`))
	}
	if len(msgs) == 0 || !strings.Contains(string(msgs[0]), `"taskIds":["`+approve.TaskID+`"]`) || !completed ||
		!strings.Contains(string(msgs[len(msgs)-1]), `"id":900`) {
		t.Errorf("subscriptions/listen: %s; want the acknowledgement, the completed task, the listen's result", msgs)
	}

	b.pollTask(doomed.TaskID, "input_required", func(tw taskWire) bool { return tw.Status == "input_required" })
	if _, rerr := b.call("tasks/cancel", map[string]string{"taskId": doomed.TaskID}); rerr != nil {
		t.Fatalf("tasks/cancel: %+v", rerr)
	}
	b.pollTask(doomed.TaskID, "cancelled", func(tw taskWire) bool { return tw.Status == "cancelled" })

	if _, rerr := b.call("tasks/get", map[string]string{"taskId": "no-such-task"}); rerr == nil || rerr.Code != -32602 || !strings.Contains(rerr.Message, "unknown task") {
		t.Fatalf("tasks/get of an unknown task: %+v; want invalid params, unknown task", rerr)
	}
	// Sessionless, a tasks request that does not declare the extension is
	// refused with the extension's error.
	if _, rerr := b.call("tasks/get", map[string]any{"taskId": approve.TaskID, "_meta": map[string]any{
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}}}); rerr == nil || rerr.Code != mcpserver.CodeMissingRequiredClientCapability {
		t.Fatalf("tasks/get without the extension declared: %+v; want %d", rerr, mcpserver.CodeMissingRequiredClientCapability)
	}
}

// An input_required round trip with a Python exec agent that makes a call
// (run.Call): the call surfaces as an elicitation carrying its name and
// input, and tasks/update's response is the call's reply.
func TestMCPTaskAnswersAnExecAgentsCall(t *testing.T) {
	t.Parallel()
	py := python3(t)
	agent := filepath.Join(t.TempDir(), "budget.py")
	if err := os.WriteFile(agent, []byte(`import json, sys
request = json.loads(sys.stdin.readline())
print("@jetrun " + json.dumps({"call": {"name": "approve-budget", "input": {"amount": request["input"]["amount"]}}}), flush=True)
reply = json.loads(sys.stdin.readline())["reply"]
print("@jetrun " + json.dumps({"result": {"summary": "budget decided", "output": {"decision": reply.get("output")}}}), flush=True)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.childWorker(t, "tasks-exec-child", map[string]string{"JETRUN_EXEC_AGENTS": "budget=" + py + " " + agent})
	_, url := mcpParentWorker(t, e, "tasks-exec-parent")
	c := newRawMCP(t, url)
	natstest.Eventually(t, 30*time.Second, func() bool {
		res, _ := c.call("tools/list", map[string]any{})
		return strings.Contains(string(res), `"budget"`)
	}, "budget is not listed")
	task := c.startTask("budget", map[string]int{"amount": 1200})
	waiting := c.pollTask(task.TaskID, "input_required", func(tw taskWire) bool { return tw.Status == "input_required" })
	req, ok := waiting.InputRequests["call:1"]
	if !ok || !strings.Contains(string(req), `"approve-budget"`) || !strings.Contains(string(req), `"amount":1200`) {
		t.Fatalf("inputRequests %v; want call:1, an elicitation with the call's name and input", waiting.InputRequests)
	}
	if _, rerr := c.call("tasks/update", map[string]any{"taskId": task.TaskID, "inputResponses": map[string]any{
		"call:1": map[string]any{"action": "accept", "content": map[string]any{"approved": true, "cap": 1000}}}}); rerr != nil {
		t.Fatalf("tasks/update: %+v", rerr)
	}
	done := c.pollTask(task.TaskID, "completed", func(tw taskWire) bool { return tw.Status == "completed" })
	if done.Result == nil || done.Result.IsError || string(done.Result.StructuredContent) != `{"decision":{"approved":true,"cap":1000}}` {
		t.Fatalf("completed task %+v (%s); want the call's reply in the output", done, done.Result.StructuredContent)
	}
}

// jetrun mcp (stdio) in a 2025-11-25 session: a tools/call with params.task
// (the 2025-11-25 experimental form, which the SDK would drop) answers a
// task, its status notifications come on the connection, and tasks/get
// answers that form.
func TestMCPStdioTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.childWorker(t, "mcp-stdio-tasks-child", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "jetrun"), "mcp")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "JETRUN_NATS_URL=" + e.url}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Wait() })
	lines := make(chan json.RawMessage, 256)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			lines <- json.RawMessage(append([]byte(nil), sc.Bytes()...))
		}
		close(lines)
	}()
	var notes []json.RawMessage // notifications/tasks/status, in order
	id := 0
	call := func(method string, params any) json.RawMessage {
		t.Helper()
		id++
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := in.Write(append(msg, '\n')); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("%s: jetrun mcp closed its output", method)
				}
				var m struct {
					ID     *int
					Method string
					Params json.RawMessage
					Result json.RawMessage
					Error  json.RawMessage
				}
				_ = json.Unmarshal(line, &m)
				switch {
				case m.Method == mcpserver.NotificationTaskStatusLegacy:
					notes = append(notes, m.Params)
				case m.ID != nil && *m.ID == id:
					if m.Error != nil {
						t.Fatalf("%s: %s", method, m.Error)
					}
					return m.Result
				}
			case <-ctx.Done():
				t.Fatalf("%s: no answer", method)
			}
		}
	}
	call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]string{"name": "jetrun-e2e-stdio", "version": "1"}})
	if _, err := in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(string(call("tools/list", map[string]any{})), `"demo"`)
	}, "demo is not listed")
	var created struct {
		Task struct{ TaskID, Status string }
	}
	raw := call("tools/call", map[string]any{"name": "demo", "arguments": map[string]int{"steps": 2, "stepMs": 10, "approveAt": 1}, "task": map[string]any{}})
	if err := json.Unmarshal(raw, &created); err != nil || created.Task.TaskID == "" {
		t.Fatalf("tools/call with params.task over stdio: %s; want {task}", raw)
	}
	task := created.Task.TaskID
	// Poll (in that form) until the notifications said input_required.
	natstest.Eventually(t, 60*time.Second, func() bool {
		var got struct{ Status string }
		_ = json.Unmarshal(call("tasks/get", map[string]string{"taskId": task}), &got)
		for _, n := range notes {
			if strings.Contains(string(n), `"status":"input_required"`) && strings.Contains(string(n), task) {
				return got.Status == "input_required"
			}
		}
		return false
	}, "no input_required notification of task %s: %s", task, &notes)
	if _, err := e.client.Signal(ctx, task, "approve", map[string]bool{"approved": true}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		call("tasks/get", map[string]string{"taskId": task})
		for _, n := range notes {
			if strings.Contains(string(n), `"status":"completed"`) && strings.Contains(string(n), task) {
				return true
			}
		}
		return false
	}, "no completed notification of task %s", task)
}
