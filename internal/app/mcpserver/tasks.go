package mcpserver

// Tasks: the MCP tasks extension (io.modelcontextprotocol/tasks, SEP-2663,
// with the 2026-07-28 revision). The Go SDK v1.8.0 has no tasks, so the
// methods are custom methods on the SDK's server and task-augmented
// tools/call is a receiving middleware.
//
// A task is a detached run and its task id is the run id: everything a
// task is lives in JetStream (the row, the calls, the signals), so any
// parent-worker answers tasks/get, tasks/update and tasks/cancel for any
// task, also after the one that created it died. The mapping:
//
//	row                                   task
//	starting, running, queued, interrupted working (statusMessage: the progress)
//	waiting for a child run               working (statusMessage: the child's id)
//	waiting for a signal or a call reply  input_required, inputRequests:
//	                                        "call:<seq>"           elicitation/create: the call's name and input
//	                                        "signal:<name>:<seen>" elicitation/create: the signal's name
//	completed                             completed, result = the tools/call result
//	error                                 completed, result isError with jetrun's failure value
//	aborted                               cancelled
//
// tasks/update's inputResponses answer: "accept" replies to a call with the
// response's content as its output (or sends the signal with the content
// as payload); "decline" and "cancel" reply to a call with an error (and
// are ignored for a signal). Keys not outstanding are ignored.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/internal/engine"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
)

// TasksExtension is the extension's identifier, in capabilities.
const TasksExtension = "io.modelcontextprotocol/tasks"

// TaskToolCallID is the parentToolCallId of the runs created as tasks (a
// task-augmented tools/call, either form): tasks/list lists them.
const TaskToolCallID = "io.jetrun/mcp-task"

// PollIntervalMs is the polling interval tasks suggest.
const PollIntervalMs = 1000

// Task statuses.
const (
	TaskWorking       = "working"
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// Task is a task as tasks/get answers it (the extension's DetailedTask).
type Task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTLMs is how long from its creation the task is kept at least: its
	// run's retention (Config.Retention, from the run's end, so a task
	// that ended is kept its run's duration longer); null when runs are
	// kept forever.
	TTLMs          *int64                  `json:"ttlMs"`
	PollIntervalMs int                     `json:"pollIntervalMs,omitempty"`
	InputRequests  map[string]InputRequest `json:"inputRequests,omitempty"`
	Result         *mcp.CallToolResult     `json:"result,omitempty"`
	Error          *jsonrpc.Error          `json:"error,omitempty"`

	cancelRequested bool   // the row's: the 2025-11-25 form says cancelled at once (legacy.go)
	approval        string // the approval ask's id while the task has no run (taskapproval.go)
}

// InputRequest is a server-to-client request a task waits on.
type InputRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// InputResponse is a client's answer to an InputRequest (an elicitation's
// result).
type InputResponse struct {
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content,omitempty"`
}

// taskResult is the answer of tasks/get, and, with resultType "task", of a
// task-augmented tools/call (CreateTaskResult).
type taskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	Task
}

// emptyTaskResult acknowledges tasks/update and tasks/cancel.
type emptyTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type updateTaskParams struct {
	mcp.ParamsBase
	TaskID         string                   `json:"taskId"`
	InputResponses map[string]InputResponse `json:"inputResponses"`
}

// addTasks registers the tasks methods. tasks/get and tasks/cancel answer
// in the extension's form when the request declares the extension, else,
// in a session, in the 2025-11-25 form (legacy.go); a sessionless request
// that does not declare it is refused, as the extension says.
func (s *Server) addTasks() error {
	if err := mcp.AddReceivingCustomMethod(s.mcp, "tasks/get", func(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (mcp.Result, error) {
		if p == nil {
			return nil, missingParams()
		}
		legacyForm, err := taskForm(ss, p.Meta)
		if err != nil {
			return nil, err
		}
		t, err := s.taskOf(ctx, p.TaskID)
		if err != nil {
			return nil, err
		}
		if legacyForm {
			s.watchTask(ss, t.TaskID, legacyStatus(t), true)
			return &legacyTaskResult{LegacyTask: legacy(t)}, nil
		}
		s.watchTask(ss, t.TaskID, t.Status, false)
		return &taskResult{ResultType: "complete", Task: *t}, nil
	}); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(s.mcp, "tasks/update", func(ctx context.Context, ss *mcp.ServerSession, p *updateTaskParams) (*emptyTaskResult, error) {
		if p == nil {
			return nil, missingParams()
		}
		if !wantsTask(p.Meta) && !legacySession(ss) {
			return nil, missingTasksCapability()
		}
		if err := s.updateTask(ctx, p.TaskID, p.InputResponses); err != nil {
			return nil, err
		}
		return &emptyTaskResult{ResultType: "complete"}, nil
	}); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(s.mcp, "tasks/cancel", func(ctx context.Context, ss *mcp.ServerSession, p *taskParams) (mcp.Result, error) {
		if p == nil {
			return nil, missingParams()
		}
		legacyForm, err := taskForm(ss, p.Meta)
		if err != nil {
			return nil, err
		}
		t, err := s.taskOf(ctx, p.TaskID)
		if err != nil {
			return nil, err
		}
		if legacyForm && terminal(legacyStatus(t)) {
			return nil, invalidParams("task %s is %s already: it cannot be cancelled", t.TaskID, legacyStatus(t))
		}
		const reason = "cancelled by the MCP client (tasks/cancel)"
		if t.approval != "" {
			t, err = s.cancelApproval(ctx, t, reason)
		} else {
			var row *jetruntype.Run
			if row, err = s.client.Cancel(ctx, p.TaskID, reason); err != nil {
				return nil, internalError("cancel run %s: %v", p.TaskID, err)
			}
			if legacyForm {
				t, err = s.taskFromRow(ctx, row)
			}
		}
		if err != nil {
			return nil, err
		}
		if !legacyForm {
			return &emptyTaskResult{ResultType: "complete"}, nil
		}
		return &legacyTaskResult{LegacyTask: legacy(t)}, nil
	}); err != nil {
		return err
	}
	return s.addLegacyTasks()
}

// taskForm says which form a tasks request gets: the 2025-11-25 one
// (legacy) when it does not declare the extension in a session; an error
// when it does not declare it without a session.
func taskForm(ss *mcp.ServerSession, meta mcp.Meta) (legacy bool, err error) {
	if wantsTask(meta) {
		return false, nil
	}
	if legacySession(ss) {
		return true, nil
	}
	return false, missingTasksCapability()
}

// missingParams is the error of a tasks request without params (the SDK
// lets a custom method's params be absent).
func missingParams() error { return invalidParams("params are required: {\"taskId\": …}") }

// missingTasksCapability is the extension's error for a request that needs
// it but does not declare it.
func missingTasksCapability() error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
	return &jsonrpc.Error{Code: CodeMissingRequiredClientCapability, Message: "Missing required client capability: declare " + TasksExtension +
		" in _meta[\"" + mcp.MetaKeyClientCapabilities + "\"]", Data: data}
}

// CodeMissingRequiredClientCapability is the JSON-RPC error of a request
// that needs a client capability it does not declare.
const CodeMissingRequiredClientCapability = -32021

func internalError(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(format, args...)}
}

// wantsTask reports whether a tools/call declares the tasks extension in
// its per-request capabilities: only then may it get a task.
func wantsTask(meta mcp.Meta) bool {
	caps, ok := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
	if !ok {
		return false
	}
	exts, ok := caps["extensions"].(map[string]any)
	if !ok {
		return false
	}
	_, ok = exts[TasksExtension]
	return ok
}

// startTask handles a task-augmented tools/call: it dispatches a detached
// run and answers the task, in the extension's form or (legacy) the
// 2025-11-25 one, once the run's row exists.
func (s *Server) startTask(ctx context.Context, req *mcp.CallToolRequest, legacyForm bool) (mcp.Result, error) {
	name := req.Params.Name
	t, ok := s.tool(name)
	if !ok {
		return nil, invalidParams("unknown tool %q: no live worker serves the agent type", name)
	}
	input, err := t.input(req.Params.Arguments)
	if err != nil {
		return nil, err
	}
	id, err := runID(req.Params.Meta)
	if err != nil {
		return nil, err
	}
	_, approval := req.Params.Meta[MetaApproval]
	if _, call := req.Params.Meta[MetaParentToolCallID]; approval && !call && id == "" {
		id = "r" + strings.ToLower(rand.Text()[:20]) // the task's id, which the client is told
	}
	preq := parent.Request{AgentType: name, RunID: id, Input: input, Detached: &events.Detached{}}
	if err := delegation(req.Params.Meta, &preq); err != nil {
		return nil, err
	}
	preq.ParentToolCallID = cmp.Or(preq.ParentToolCallID, TaskToolCallID)
	var task *Task
	if preq.Approval != nil {
		task, err = s.startApprovalTask(ctx, preq) // taskapproval.go
	} else {
		var d *parent.Dispatched
		if d, err = s.client.Dispatch(ctx, preq); err != nil {
			return nil, dispatchError(name, err)
		}
		task, err = s.taskFromRow(ctx, d.Run)
	}
	if err != nil {
		return nil, err
	}
	if legacyForm {
		s.watchTask(req.Session, task.TaskID, legacyStatus(task), true)
		return &createLegacyTaskResult{Task: legacy(task)}, nil
	}
	s.watchTask(req.Session, task.TaskID, task.Status, false)
	// CreateTaskResult carries no result, error or inputRequests.
	task.Result, task.Error, task.InputRequests = nil, nil, nil
	return &taskResult{ResultType: "task", Task: *task}, nil
}

// taskRow returns the row of task id, or the extension's error for an
// unknown task.
func (s *Server) taskRow(ctx context.Context, id string) (*jetruntype.Run, error) {
	if events.ValidateID(id) != nil {
		return nil, invalidParams("unknown task %q", id)
	}
	row, err := s.runs.Get(ctx, id)
	if errors.Is(err, kv.ErrRunNotFound) {
		return nil, errNoRun
	}
	if err != nil {
		return nil, internalError("read task %s: %v", id, err)
	}
	return row, nil
}

// errNoRun is taskRow's error for a task without a run: unknown, or
// waiting for its approval (taskapproval.go).
var errNoRun = errors.New("mcpserver: the task has no run")

func (s *Server) taskOf(ctx context.Context, id string) (*Task, error) {
	row, err := s.taskRow(ctx, id)
	if errors.Is(err, errNoRun) {
		return s.approvalTask(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	return s.taskFromRow(ctx, row)
}

// taskFromRow maps a run's row (and, while it runs, its pending calls) to
// its task.
func (s *Server) taskFromRow(ctx context.Context, row *jetruntype.Run) (*Task, error) {
	t := &Task{TaskID: row.ID, CreatedAt: stamp(row.CreatedAt), LastUpdatedAt: stamp(lastUpdated(row)), PollIntervalMs: PollIntervalMs,
		TTLMs: s.ttl(row), cancelRequested: row.CancelRequested}
	switch row.Status {
	case events.StatusCompleted:
		t.Status, t.StatusMessage = TaskCompleted, row.Summary
		t.Result = completed(&parent.Result{RunID: row.ID, Summary: row.Summary, Output: row.Output, Row: row})
		return t, nil
	case events.StatusError:
		f := row.Failure()
		t.Status, t.StatusMessage = TaskCompleted, f.Error()
		t.Result = s.failed(f, row.AgentType)
		return t, nil
	case events.StatusAborted:
		t.Status, t.StatusMessage = TaskCancelled, row.CancelReason
		if t.StatusMessage == "" {
			t.StatusMessage = row.Error
		}
		return t, nil
	}
	t.Status = TaskWorking
	if p := row.Progress; p != nil {
		t.StatusMessage = strings.TrimSpace(fmt.Sprintf("%.0f%% %s", 100*p.Fraction, firstOf(p.Message, p.Phase)))
	}
	if row.Status == events.StatusInterrupted {
		t.StatusMessage = "interrupted (" + row.Reason + "); the run may go on"
	}
	if child, ok := strings.CutPrefix(row.WaitingFor, "run:"); ok && t.StatusMessage == "" {
		t.StatusMessage = "waiting for run " + child
	}
	requests, err := s.inputRequests(ctx, row)
	if err != nil {
		return nil, err
	}
	if len(requests) > 0 {
		t.Status, t.InputRequests = TaskInputRequired, requests
	}
	return t, nil
}

// ttl is the task ttl of row, in milliseconds from its creation: the
// retention, which counts from the run's end, so a run that ended is kept
// its duration longer; nil when runs are kept forever.
func (s *Server) ttl(row *jetruntype.Run) *int64 {
	if s.retention <= 0 {
		return nil
	}
	d := s.retention
	if row.Status.Final() && row.FinishedAt.After(row.CreatedAt) {
		d += row.FinishedAt.Sub(row.CreatedAt)
	}
	ms := d.Milliseconds()
	return &ms
}

// inputRequests lists what a run waits on from its caller, which a client
// can answer: its unanswered calls and the signal it waits for.
func (s *Server) inputRequests(ctx context.Context, row *jetruntype.Run) (map[string]InputRequest, error) {
	out := map[string]InputRequest{}
	if row.Status == events.StatusRunning {
		calls, err := s.client.Calls(ctx, row.ID)
		if err != nil {
			return nil, internalError("read the calls of run %s: %v", row.ID, err)
		}
		for _, c := range calls {
			if c.Reply != nil {
				continue
			}
			out["call:"+strconv.FormatInt(c.Call.Seq, 10)] = elicitation(
				fmt.Sprintf("The run calls %q with input %s: reply with its output.", c.Call.Name, compact(c.Call.Input)),
				map[string]any{"call": map[string]any{"seq": c.Call.Seq, "name": c.Call.Name, "input": c.Call.Input}})
		}
	}
	// waitingFor is also "run:<child id>" (a child it awaits, which no
	// client answers) or "call:<name>" (listed above, as its call): only a
	// signal name is a signal.
	if name := row.WaitingFor; name != "" && events.ValidateToken("signal name", name) == nil {
		seen, err := s.signalSeen(ctx, row.ID, name)
		if err != nil {
			return nil, internalError("read the signal position of run %s: %v", row.ID, err)
		}
		key := "signal:" + name + ":" + strconv.FormatUint(seen, 10)
		out[key] = elicitation(fmt.Sprintf("The run waits for the signal %q: accept to send it, the content being its payload.", name),
			map[string]any{"signal": map[string]any{"name": name}})
	}
	return out, nil
}

// signalSeen returns the signals-stream sequence of the last signal name
// run id received (0 for none), from its stored row.
func (s *Server) signalSeen(ctx context.Context, id, name string) (uint64, error) {
	if s.rt == nil {
		return 0, errors.New("mcpserver: no Runtime configured")
	}
	row, _, err := engine.From(s.rt).Store().Get(ctx, id)
	if err != nil {
		return 0, err
	}
	return row.SignalsSeen[name], nil
}

// elicitation is a form elicitation/create whose accepted content is the
// reply (any object); jetrun's own description of the request goes in
// _meta["io.jetrun/input"].
func elicitation(message string, what map[string]any) InputRequest {
	params, _ := json.Marshal(map[string]any{
		"mode":            "form",
		"message":         message,
		"requestedSchema": map[string]any{"type": "object", "properties": map[string]any{}},
		"_meta":           map[string]any{"io.jetrun/input": what},
	})
	return InputRequest{Method: "elicitation/create", Params: params}
}

// updateTask delivers a client's inputResponses: call replies and signals.
func (s *Server) updateTask(ctx context.Context, id string, responses map[string]InputResponse) error {
	row, err := s.taskRow(ctx, id)
	if errors.Is(err, errNoRun) {
		return s.updateApprovalTask(ctx, id, responses)
	}
	if err != nil {
		return err
	}
	outstanding, err := s.inputRequests(ctx, row)
	if err != nil {
		return err
	}
	for key, resp := range responses {
		if _, ok := outstanding[key]; !ok {
			continue // not outstanding: answered already, superseded or never asked
		}
		content := resp.Content
		if len(content) == 0 {
			content = json.RawMessage("{}")
		}
		kind, rest, _ := strings.Cut(key, ":")
		switch kind {
		case "call":
			seq, _ := strconv.ParseInt(rest, 10, 64)
			var output any = content
			errText := ""
			if resp.Action != "accept" {
				output, errText = nil, "the MCP client answered "+firstOf(resp.Action, "nothing")
			}
			_, err := s.client.Answer(ctx, id, seq, output, errText)
			if err != nil && !errors.Is(err, parent.ErrCallAnswered) && !errors.Is(err, parent.ErrRunEnded) {
				return internalError("reply to call %d of run %s: %v", seq, id, err)
			}
		case "signal":
			if resp.Action != "accept" {
				continue
			}
			name, seen, _ := strings.Cut(rest, ":")
			if handled, err := s.answerSignalAsk(ctx, id, name, seen, content); handled || err != nil {
				if err != nil {
					return err
				}
				continue
			}
			if _, err := s.client.Signal(ctx, id, name, content); err != nil && !errors.Is(err, parent.ErrRunEnded) {
				return internalError("send signal %q to run %s: %v", name, id, err)
			}
		}
	}
	return nil
}

// answerSignalAsk answers the ask of run id's wait for signal name (after
// signal seen, as the input request's key says) with content, by "mcp
// client": the same ask the inbox and the API answer, so the first answer
// wins. handled is false when the wait has no ask (the signal is then
// sent as it is).
func (s *Server) answerSignalAsk(ctx context.Context, id, name, seen string, content json.RawMessage) (handled bool, err error) {
	n, perr := strconv.ParseUint(seen, 10, 64)
	if s.rt == nil || perr != nil {
		return false, nil
	}
	st := engine.From(s.rt).Asks()
	a, _, err := st.Get(ctx, asks.SignalID(id, name, n))
	switch {
	case errors.Is(err, asks.ErrNotFound):
		return false, nil
	case err != nil:
		return true, internalError("read the ask of run %s: %v", id, err)
	}
	answered, err := st.Answer(ctx, a.ID, a.Digest, content, "mcp client")
	var bad *asks.ValueError
	switch {
	case errors.Is(err, asks.ErrAnswered), errors.Is(err, asks.ErrClosed):
		return true, nil // answered already, or the wait ended: as for a key not outstanding
	case errors.As(err, &bad):
		return true, invalidParams("the response to signal %q of task %s: %v", name, id, bad)
	case err != nil:
		return true, internalError("answer the ask of run %s: %v", id, err)
	}
	if _, err := st.Deliver(ctx, answered); err != nil {
		return true, internalError("deliver the answer to run %s: %v", id, err)
	}
	return true, nil
}

// failed is the tools/call result of a run of agent type name that did not
// complete: jetrun's failure value in _meta[MetaFailure], and as
// structuredContent too unless the tool declares an output schema (which
// it would break: MCP wants structuredContent to match it, and the
// TypeScript SDK's client refuses a result where it does not, isError or
// not).
func (s *Server) failed(f *jetruntype.Failure, name string) *mcp.CallToolResult {
	res := &mcp.CallToolResult{
		Meta:    mcp.Meta{MetaRunID: f.RunID, MetaFailure: f},
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: f.Error()}},
	}
	if t, ok := s.tool(name); !ok || len(t.OutputSchema) == 0 {
		res.StructuredContent = f
	}
	return res
}

func lastUpdated(row *jetruntype.Run) time.Time {
	last := row.CreatedAt
	for _, t := range []time.Time{row.StartedAt, row.LastSignalAt, row.FinishedAt} {
		if t.After(last) {
			last = t
		}
	}
	if row.Progress != nil && row.Progress.At.After(last) {
		last = row.Progress.At
	}
	return last
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// compact is raw without insignificant space, cut to a readable length.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	if b.Len() <= 200 {
		return b.String()
	}
	return string(b.Bytes()[:200]) + "…"
}
