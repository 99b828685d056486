package mcpserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

type legacyTask struct {
	TaskID       string
	Status       string
	TTL          *int64 `json:"ttl"`
	PollInterval int
}

// The 2025-11-25 experimental form in a session: the capability, every tool
// optionally a task, params.task answering {task}, tasks/get, tasks/list,
// notifications/tasks/status, tasks/result waiting for the end, and
// tasks/cancel.
func TestExperimentalTasksForm(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &rawSession{t: t, url: f.url}
	init := c.call(ctx, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]string{"name": "raw", "version": "1"}})
	var caps struct {
		Capabilities struct {
			Tasks struct {
				List, Cancel *struct{}
				Requests     struct{ Tools struct{ Call *struct{} } }
			}
		}
	}
	if err := json.Unmarshal(init, &caps); err != nil || caps.Capabilities.Tasks.Requests.Tools.Call == nil ||
		caps.Capabilities.Tasks.List == nil || caps.Capabilities.Tasks.Cancel == nil {
		t.Fatalf("initialize: %s (%v); want capabilities.tasks with list, cancel, requests.tools.call", init, err)
	}
	c.do(ctx, "POST", map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}).Body.Close()
	notes := c.listen(ctx, mcpserver.NotificationTaskStatusLegacy)

	var list struct {
		Tools []struct {
			Name      string
			Execution struct{ TaskSupport string }
		}
	}
	if err := json.Unmarshal(c.call(ctx, "tools/list", map[string]any{}), &list); err != nil || len(list.Tools) != 3 {
		t.Fatalf("tools/list: %+v (%v)", list, err)
	}
	for _, tl := range list.Tools {
		if tl.Execution.TaskSupport != "optional" {
			t.Errorf("tool %s: execution.taskSupport %q; want optional", tl.Name, tl.Execution.TaskSupport)
		}
	}

	var created struct{ Task legacyTask }
	raw := c.call(ctx, "tools/call", map[string]any{"name": "steps", "arguments": map[string]int{"steps": 2}, "task": map[string]any{"ttl": 60000}})
	if err := json.Unmarshal(raw, &created); err != nil || created.Task.TaskID == "" || created.Task.PollInterval == 0 ||
		!strings.Contains(string(raw), `"ttl":null`) {
		t.Fatalf("tools/call with params.task: %s (%v); want {task: {taskId, status, ttl: null, pollInterval}}", raw, err)
	}
	id := created.Task.TaskID

	// Its status as it changes: input_required while the run waits.
	select {
	case p := <-notes:
		var n legacyTask
		if err := json.Unmarshal(p, &n); err != nil || n.TaskID != id || n.Status != mcpserver.TaskInputRequired {
			t.Fatalf("notifications/tasks/status %s; want task %s input_required", p, id)
		}
	case <-ctx.Done():
		t.Fatal("no notifications/tasks/status")
	}
	var got legacyTask
	if raw := c.call(ctx, "tasks/get", map[string]string{"taskId": id}); json.Unmarshal(raw, &got) != nil ||
		got.Status != mcpserver.TaskInputRequired || strings.Contains(string(raw), "inputRequests") {
		t.Fatalf("tasks/get: %s; want the task in the 2025-11-25 form, input_required", raw)
	}
	var listed struct{ Tasks []legacyTask }
	if raw := c.call(ctx, "tasks/list", map[string]any{}); json.Unmarshal(raw, &listed) != nil || len(listed.Tasks) != 1 || listed.Tasks[0].TaskID != id {
		t.Fatalf("tasks/list: %s; want the session's task %s", raw, id)
	}

	// tasks/result waits for the end.
	type answer struct{ res, err json.RawMessage }
	done := make(chan answer, 1)
	result := &rawSession{t: t, url: f.url, id: c.id, seq: 1000}
	go func() {
		res, err := result.callErr(ctx, "tasks/result", map[string]string{"taskId": id})
		done <- answer{res, err}
	}()
	if _, err := f.env.Client.Signal(ctx, id, "go", nil); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || !strings.Contains(string(a.res), `"structuredContent":{"done":2}`) ||
		!strings.Contains(string(a.res), `"io.modelcontextprotocol/related-task":{"taskId":"`+id+`"}`) {
		t.Fatalf("tasks/result: %s %s; want the tools/call result related to the task", a.res, a.err)
	}
	if _, rerr := c.callErr(ctx, "tasks/cancel", map[string]string{"taskId": id}); rerr == nil || !strings.Contains(string(rerr), "-32602") {
		t.Errorf("tasks/cancel of a completed task: %s; want invalid params", rerr)
	}

	// tasks/cancel answers the task and cancels its run.
	raw = c.call(ctx, "tools/call", map[string]any{"name": "block", "arguments": map[string]any{}, "task": map[string]any{}})
	if err := json.Unmarshal(raw, &created); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, f.env.Store, created.Task.TaskID, 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	if raw := c.call(ctx, "tasks/cancel", map[string]string{"taskId": created.Task.TaskID}); !strings.Contains(string(raw), `"taskId":"`+created.Task.TaskID+`"`) ||
		!strings.Contains(string(raw), `"status":"cancelled"`) {
		t.Errorf("tasks/cancel: %s; want the task, cancelled (that form's receiver cancels before it answers)", raw)
	}
	if row := jetruntest.WaitRow(t, f.env.Store, created.Task.TaskID, 30*time.Second, jetruntest.Final); row.Status != events.StatusAborted {
		t.Errorf("cancelled task's run ended %s; want aborted", row.Status)
	}
}
