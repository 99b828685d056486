package mcpserver

// Tasks that need approval. A task-augmented tools/call with
// _meta[MetaApproval] (and MetaParent) asks on the parent run before the
// task's run is dispatched, as a plain call does (approval.go), but does
// not wait for the answer: it answers the task at once, input_required,
// its input request "approval:<ask id>" the ask. Until its run exists the
// task is its ask (asks.Store.FindApproval finds it by the task id, which
// is the run id):
//
//	ask                      task
//	open                     input_required ("approval:<ask id>")
//	answered, approved       the run is dispatched; then the run's task
//	answered, refused        completed, its result {"rejected": true, "answer": …}, not an error
//	closed without answer    cancelled (tasks/cancel closes it)
//
// The approved run is dispatched by the server that created the task (it
// awaits the answer), or, after that server died, by whichever
// parent-worker reads the task next (tasks/get, tasks/update, tasks/result):
// a dispatch is idempotent by run id, so the run starts once.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
)

// approvalInput is the input request key prefix of a task's approval.
const approvalInput = "approval:"

// startApprovalTask starts task preq (a detached dispatch with an
// Approval): it stores the approval ask, has this server await its answer
// and dispatch the run, and returns the task as soon as the ask is stored.
func (s *Server) startApprovalTask(ctx context.Context, preq parent.Request) (*Task, error) {
	if s.rt == nil {
		return nil, internalError("mcpserver: no Runtime configured")
	}
	if row, err := s.runs.Get(ctx, preq.RunID); err == nil {
		return s.taskFromRow(ctx, row) // approved and dispatched before
	} else if !errors.Is(err, kv.ErrRunNotFound) {
		return nil, internalError("read task %s: %v", preq.RunID, err)
	}
	id := asks.SignalID(preq.Parent, asks.ApprovalName(preq.RunID), 0)
	w, err := engine.From(s.rt).Asks().Bucket().Watch(ctx, id)
	if err != nil {
		return nil, internalError("watch the approval of task %s: %v", preq.RunID, err)
	}
	defer func() { _ = w.Stop() }()
	ended := s.awaitApproval(preq)
	for stored := false; !stored; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.life.Done():
			return nil, internalError("the server is stopping: call again with the same _meta to find the task")
		case err := <-ended:
			if err != nil {
				return nil, dispatchError(preq.AgentType, err)
			}
			stored = true // answered already (a deadline's default, a run that exists)
		case e := <-w.Updates():
			stored = e != nil && e.Operation() == jetstream.KeyValuePut
		}
	}
	return s.taskOf(ctx, preq.RunID)
}

// awaitApproval dispatches preq once its approval is answered, in a
// goroutine of s's (one per task), and sends the dispatch's error (nil
// when dispatched or refused) on the returned channel. A stopped server,
// or one awaiting the task already, starts nothing.
func (s *Server) awaitApproval(preq parent.Request) <-chan error {
	ended := make(chan error, 1)
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if s.life.Err() != nil || s.approving[preq.RunID] { // stopped: s.loop takes no more (Stop)
		return ended
	}
	s.approving[preq.RunID] = true
	s.loop.Go(func() {
		defer func() {
			s.notifyMu.Lock()
			delete(s.approving, preq.RunID)
			s.notifyMu.Unlock()
		}()
		_, err := s.client.Dispatch(s.life, preq)
		if err != nil && s.life.Err() == nil && !errors.Is(err, asks.ErrClosed) {
			s.log.Warn("mcp: dispatch an approved task", "task_id", preq.RunID, "err", err)
		}
		ended <- err
	})
	return ended
}

// approvalTask is task id while it has no run: its approval ask's, if it
// has one. An approved one is dispatched here, and its run's task
// returned.
func (s *Server) approvalTask(ctx context.Context, id string) (*Task, error) {
	if s.rt == nil {
		return nil, invalidParams("unknown task %q", id)
	}
	a, err := engine.From(s.rt).Asks().FindApproval(ctx, id)
	if errors.Is(err, asks.ErrNotFound) {
		return nil, invalidParams("unknown task %q", id)
	}
	if err != nil {
		return nil, internalError("read task %s: %v", id, err)
	}
	preq, err := approvalRequest(a, id)
	if err != nil {
		return nil, internalError("task %s: %v", id, err)
	}
	t := &Task{TaskID: id, CreatedAt: stamp(a.AskedAt), LastUpdatedAt: stamp(a.AskedAt), PollIntervalMs: PollIntervalMs,
		TTLMs: s.ttl(&jetruntype.Run{CreatedAt: a.AskedAt}), approval: a.ID}
	switch {
	case a.Status == events.AskOpen:
		s.awaitApproval(preq) // after the creating server died, someone has to dispatch it
		t.Status, t.StatusMessage = TaskInputRequired, a.Title
		t.InputRequests = map[string]InputRequest{approvalInput + a.ID: approvalElicitation(a)}
	case a.Status == events.AskAnswered && a.Answer != nil && asks.Rejected(a.Answer.Value):
		t.LastUpdatedAt = stamp(a.Answer.At)
		t.Status, t.StatusMessage, t.Result = TaskCompleted, asks.RejectedSummary, rejected(id, a.Answer.Value)
	case a.Status == events.AskAnswered:
		d, err := s.client.Dispatch(ctx, preq)
		if err != nil {
			return nil, internalError("dispatch the approved task %s: %v", id, err)
		}
		if d.Run == nil { // refused after all: read the ask again
			return s.approvalTask(ctx, id)
		}
		return s.taskFromRow(ctx, d.Run)
	default:
		t.LastUpdatedAt = stamp(a.AskedAt)
		t.Status, t.StatusMessage = TaskCancelled, "the approval was closed: "+a.ClosedReason
	}
	return t, nil
}

// approvalRequest is the dispatch task id's approval ask a stands for:
// its payload is the child's agent type, call id, run id and input
// (asks.ApprovalPayload), its run the parent.
func approvalRequest(a *events.Ask, id string) (parent.Request, error) {
	var p struct {
		AgentType string          `json:"agentType"`
		CallID    string          `json:"callId"`
		Input     json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(a.Payload, &p); err != nil || p.AgentType == "" {
		return parent.Request{}, fmt.Errorf("approval %s shows no agent type and input: %s", a.ID, a.Payload)
	}
	return parent.Request{AgentType: p.AgentType, RunID: id, Input: p.Input, Detached: &events.Detached{},
		Parent: a.RunID, ParentToolCallID: p.CallID, Approval: &parent.Approval{Title: a.Title}}, nil
}

// approvalElicitation asks an MCP client for approval a: accept with
// {"approved": true|false} (accept with no content approves), decline
// refuses.
func approvalElicitation(a *events.Ask) InputRequest {
	params, _ := json.Marshal(map[string]any{
		"mode":    "form",
		"message": a.Title + " " + compact(a.Payload),
		"requestedSchema": map[string]any{"type": "object", "properties": map[string]any{
			"approved": map[string]any{"type": "boolean"}, "comment": map[string]any{"type": "string"}}},
		"_meta": map[string]any{"io.jetrun/input": map[string]any{"approval": map[string]any{
			"askId": a.ID, "digest": a.Digest, "payload": a.Payload}}},
	})
	return InputRequest{Method: "elicitation/create", Params: params}
}

// answerApproval answers task t's approval ask with a client's response
// (by "mcp client"; the first answer wins, as for any ask), then reads the
// task again so an approved run is dispatched at once.
func (s *Server) answerApproval(ctx context.Context, t *Task, resp InputResponse) error {
	var value json.RawMessage
	switch resp.Action {
	case "accept":
		value = json.RawMessage(`{"approved":true}`)
		var v map[string]any
		if json.Unmarshal(resp.Content, &v) == nil && v["approved"] != nil {
			value = resp.Content
		}
	case "decline":
		value = json.RawMessage(`{"approved":false}`)
	default:
		return nil // cancel: the ask stays open
	}
	st := engine.From(s.rt).Asks()
	a, _, err := st.Get(ctx, t.approval)
	if err != nil {
		return internalError("read the approval of task %s: %v", t.TaskID, err)
	}
	_, err = st.Answer(ctx, a.ID, a.Digest, value, "mcp client")
	var bad *asks.ValueError
	switch {
	case errors.Is(err, asks.ErrAnswered), errors.Is(err, asks.ErrClosed):
		return nil // answered already, or closed: as for a key not outstanding
	case errors.As(err, &bad):
		return invalidParams("the response to the approval of task %s: %v", t.TaskID, bad)
	case err != nil:
		return internalError("answer the approval of task %s: %v", t.TaskID, err)
	}
	_, err = s.approvalTask(ctx, t.TaskID)
	return err
}

// cancelApproval closes task t's open approval: nothing is dispatched.
// An approval answered meanwhile has its run, which is cancelled instead.
func (s *Server) cancelApproval(ctx context.Context, t *Task, reason string) (*Task, error) {
	a, err := engine.From(s.rt).Asks().Close(ctx, t.approval, reason)
	if err != nil {
		return nil, internalError("close the approval of task %s: %v", t.TaskID, err)
	}
	if a.Status == events.AskOpen || a.Status == events.AskClosed {
		return s.approvalTask(ctx, t.TaskID)
	}
	t, err = s.approvalTask(ctx, t.TaskID)
	if err != nil || t.approval != "" || terminal(t.Status) {
		return t, err
	}
	row, err := s.client.Cancel(ctx, t.TaskID, reason)
	if err != nil {
		return nil, internalError("cancel run %s: %v", t.TaskID, err)
	}
	return s.taskFromRow(ctx, row)
}

// updateApprovalTask delivers a client's inputResponses to task id, which
// has no run: only its open approval is outstanding.
func (s *Server) updateApprovalTask(ctx context.Context, id string, responses map[string]InputResponse) error {
	t, err := s.approvalTask(ctx, id)
	if err != nil {
		return err
	}
	for key, resp := range responses {
		if _, ok := t.InputRequests[key]; ok && t.approval != "" {
			return s.answerApproval(ctx, t, resp)
		}
	}
	return nil
}
