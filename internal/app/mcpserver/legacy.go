package mcpserver

// The 2025-11-25 experimental tasks form, served to sessions (2025-11-25
// and older, and stdio) next to the extension's form:
//
//   - tools/call with params.task answers {task} at once (the same detached
//     run, task id = run id). The Go SDK v1.8.0 drops params.task when it
//     decodes the request, so jetrun lifts it into _meta[metaLiftedTask]
//     before the SDK reads the message: from the POST body over HTTP
//     (servePost, wire.go), from the connection over stdio (liftingConn).
//   - tasks/get and tasks/cancel answer the Task of that form (ttl,
//     pollInterval; a run that ended "error" is failed) when the request
//     does not declare the extension; tasks/cancel of a finished task is an
//     error.
//   - tasks/result waits for the end and answers the tools/call result; while
//     it waits, what the run waits on (its calls, its signal) goes to the
//     client as elicitation/create requests, and their answers reply.
//   - tasks/list lists every task, whichever session or parent-worker
//     created it (the runs of task-augmented tools/calls, TaskToolCallID,
//     read from the runs bucket), newest first, TasksPerPage a page, with
//     nextCursor.
//   - notifications/tasks/status (notify.go) carries that Task.
//   - initialize advertises capabilities.tasks; tools/list marks every tool
//     execution.taskSupport "optional" (a call may be a task or not).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
)

// metaLiftedTask is where a tools/call's params.task goes, for the
// middleware to see; a client's own value there is dropped.
const metaLiftedTask = "io.jetrun/liftedTask"

// metaRelatedTask ties a message to its task (2025-11-25).
const metaRelatedTask = "io.modelcontextprotocol/related-task"

// NotificationTaskStatusLegacy is the 2025-11-25 task status notification.
const NotificationTaskStatusLegacy = "notifications/tasks/status"

// LegacyTask is a task in the 2025-11-25 form.
type LegacyTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           *int64 `json:"ttl"`
	PollInterval  int    `json:"pollInterval,omitempty"`
}

// legacy maps a task to the 2025-11-25 form, where a tool result with
// isError is a failed task.
func legacy(t *Task) LegacyTask {
	return LegacyTask{TaskID: t.TaskID, Status: legacyStatus(t), StatusMessage: t.StatusMessage, CreatedAt: t.CreatedAt,
		LastUpdatedAt: t.LastUpdatedAt, TTL: t.TTLMs, PollInterval: t.PollIntervalMs}
}

// legacyStatus is a task's status in the 2025-11-25 form, where a tool
// result with isError is a failed task and a cancel is final at once (the
// receiver "MUST transition the task to cancelled" before answering
// tasks/cancel): a run whose cancel was requested is cancelled there, also
// if it then ends otherwise.
func legacyStatus(t *Task) string {
	switch {
	case t.cancelRequested:
		return TaskCancelled
	case t.Status == TaskCompleted && t.Result != nil && t.Result.IsError:
		return TaskFailed
	}
	return t.Status
}

type legacyTaskResult struct {
	mcp.ResultBase
	LegacyTask
}

type createLegacyTaskResult struct {
	mcp.ResultBase
	Task LegacyTask `json:"task"`
}

type listTasksParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

type listTasksResult struct {
	mcp.ResultBase
	Tasks      []LegacyTask `json:"tasks"`
	NextCursor string       `json:"nextCursor,omitempty"`
}

// liftTask moves a tools/call's params.task into _meta[metaLiftedTask]
// (and drops a value the client put there). Other messages are returned as
// they are.
func liftTask(msg []byte) []byte {
	var m struct {
		Method string                     `json:"method"`
		Params map[string]json.RawMessage `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method != "tools/call" || m.Params == nil {
		return msg
	}
	var full map[string]json.RawMessage
	if json.Unmarshal(msg, &full) != nil {
		return msg
	}
	lifted, err := liftParams(full["params"])
	if err != nil {
		return msg
	}
	full["params"] = lifted
	out, err := json.Marshal(full)
	if err != nil {
		return msg
	}
	return out
}

func liftParams(raw json.RawMessage) (json.RawMessage, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	var meta map[string]json.RawMessage
	if m, ok := p["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		return raw, nil
	}
	task, hasTask := p["task"]
	_, hasLifted := meta[metaLiftedTask]
	if !hasTask && !hasLifted {
		return raw, nil
	}
	delete(meta, metaLiftedTask)
	if hasTask {
		if meta == nil {
			meta = map[string]json.RawMessage{}
		}
		meta[metaLiftedTask] = task
		delete(p, "task")
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	p["_meta"] = m
	return json.Marshal(p)
}

// liftingConn lifts params.task from the messages a stdio client sends.
type liftingConn struct{ mcp.Connection }

func (c liftingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.Method == "tools/call" && len(req.Params) > 0 {
		if lifted, err := liftParams(req.Params); err == nil {
			req.Params = lifted
		}
	}
	return msg, err
}

// wantsLegacyTask reports whether a tools/call asked for a task in the
// 2025-11-25 form.
func wantsLegacyTask(meta mcp.Meta) bool {
	_, ok := meta[metaLiftedTask]
	return ok
}

// legacySession reports whether ss speaks a revision with sessions, where
// the 2025-11-25 form is served.
func legacySession(ss *mcp.ServerSession) bool {
	p := ss.InitializeParams()
	return p != nil && p.ProtocolVersion < SessionlessRevision
}

// addLegacyTasks registers tasks/result and tasks/list.
func (s *Server) addLegacyTasks() error {
	if err := mcp.AddReceivingCustomMethod(s.mcp, "tasks/result", func(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (*mcp.CallToolResult, error) {
		if p == nil {
			return nil, missingParams()
		}
		if !legacySession(ss) {
			return nil, sessionsOnly("tasks/result")
		}
		return s.taskResult(ctx, ss, p.TaskID)
	}); err != nil {
		return err
	}
	return mcp.AddReceivingCustomMethod(s.mcp, "tasks/list", func(ctx context.Context, ss *mcp.ServerSession, p *listTasksParams) (*listTasksResult, error) {
		if !legacySession(ss) {
			return nil, sessionsOnly("tasks/list")
		}
		cursor := ""
		if p != nil { // params are optional
			cursor = p.Cursor
		}
		return s.listTasks(ctx, cursor)
	})
}

// listTasks answers a page of tasks/list: the runs created as tasks,
// newest first (then by id), after cursor.
func (s *Server) listTasks(ctx context.Context, cursor string) (*listTasksResult, error) {
	var after *jetruntype.Run
	if cursor != "" {
		var err error
		if after, err = decodeTaskCursor(cursor); err != nil {
			return nil, invalidParams("tasks/list: %q is not a cursor tasks/list handed out", cursor)
		}
	}
	rows, err := s.runs.List(ctx, kv.ListOptions{ParentToolCallID: TaskToolCallID})
	if err != nil {
		return nil, internalError("list the tasks: %v", err)
	}
	rows = slices.DeleteFunc(rows, func(r *jetruntype.Run) bool { return r.Parent != "" })
	slices.SortFunc(rows, newestFirst)
	if after != nil {
		i, found := slices.BinarySearchFunc(rows, after, newestFirst)
		if found {
			i++
		}
		rows = rows[i:]
	}
	out := &listTasksResult{Tasks: []LegacyTask{}}
	if len(rows) > s.perPage {
		rows = rows[:s.perPage]
		out.NextCursor = taskCursor(rows[len(rows)-1])
	}
	for _, row := range rows {
		t, err := s.taskFromRow(ctx, row)
		if err != nil {
			return nil, err
		}
		out.Tasks = append(out.Tasks, legacy(t))
	}
	return out, nil
}

// newestFirst orders runs by creation, newest first, then by id.
func newestFirst(a, b *jetruntype.Run) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// taskCursor is the tasks/list cursor after row: its creation time and id.
func taskCursor(row *jetruntype.Run) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(row.CreatedAt.UnixNano(), 10) + ":" + row.ID))
}

// decodeTaskCursor returns the position a taskCursor names, as a run with
// its creation time and id.
func decodeTaskCursor(c string) (*jetruntype.Run, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, err
	}
	ns, id, _ := strings.Cut(string(raw), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return nil, err
	}
	if err := events.ValidateID(id); err != nil {
		return nil, err
	}
	return &jetruntype.Run{ID: id, CreatedAt: time.Unix(0, n)}, nil
}

// sessionsOnly is the error of a 2025-11-25 tasks method asked without a
// session: that revision's tasks extension has no such method.
func sessionsOnly(method string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
		Message: fmt.Sprintf("%s is of the 2025-11-25 experimental tasks, served in sessions; with %s use tasks/get", method, SessionlessRevision)}
}

// taskResult waits for task id to end and answers its tools/call result,
// asking the client (elicitation/create) for what the run waits on
// meanwhile.
func (s *Server) taskResult(ctx context.Context, ss *mcp.ServerSession, id string) (*mcp.CallToolResult, error) {
	asked := map[string]bool{}
	tick := time.NewTicker(PollIntervalMs * time.Millisecond / 4)
	defer tick.Stop()
	for {
		t, err := s.taskOf(ctx, id)
		if err != nil {
			return nil, err
		}
		switch legacyStatus(t) {
		case TaskCompleted, TaskFailed:
			res := *t.Result
			res.Meta = maps.Clone(res.Meta)
			res.Meta[metaRelatedTask] = map[string]string{"taskId": id}
			return &res, nil
		case TaskCancelled:
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "task " + id + " was cancelled: " + t.StatusMessage}
		}
		for key, req := range t.InputRequests {
			if asked[key] {
				continue
			}
			asked[key] = true
			var p mcp.ElicitParams
			if err := json.Unmarshal(req.Params, &p); err != nil {
				continue
			}
			if p.Meta == nil {
				p.Meta = mcp.Meta{}
			}
			p.Meta[metaRelatedTask] = map[string]string{"taskId": id}
			res, err := ss.Elicit(ctx, &p)
			if err != nil {
				s.log.WarnContext(ctx, "mcp: ask the client for a task's input", "task_id", id, "input", key, "err", err)
				continue // the client polls; the run waits
			}
			content, _ := json.Marshal(res.Content)
			if err := s.updateTask(ctx, id, map[string]InputResponse{key: {Action: res.Action, Content: content}}); err != nil {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// initializeResult adds capabilities.tasks (2025-11-25) to the SDK's
// initialize result.
type initializeResult struct{ *mcp.InitializeResult }

func (r initializeResult) MarshalJSON() ([]byte, error) {
	return patchJSON(r.InitializeResult, func(m map[string]any) {
		caps, _ := m["capabilities"].(map[string]any)
		if caps == nil {
			caps = map[string]any{}
			m["capabilities"] = caps
		}
		caps["tasks"] = map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
			"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
	})
}

// listToolsResult marks every tool execution.taskSupport "optional".
type listToolsResult struct{ *mcp.ListToolsResult }

func (r listToolsResult) MarshalJSON() ([]byte, error) {
	return patchJSON(r.ListToolsResult, func(m map[string]any) {
		tools, _ := m["tools"].([]any)
		for _, t := range tools {
			if tool, ok := t.(map[string]any); ok {
				tool["execution"] = map[string]any{"taskSupport": "optional"}
			}
		}
	})
}

func patchJSON(v any, patch func(map[string]any)) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	patch(m)
	return json.Marshal(m)
}
