package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// approveChild asks a person to approve the delegation of req (child id,
// call callID) and returns their answer when they refused it (nil when
// approved, or when the child exists already).
func (e *execution) approveChild(ctx context.Context, client *parent.Client, id, callID string, req ChildRequest) (json.RawMessage, error) {
	_, err := client.Inspect(ctx, id)
	switch {
	case err == nil:
		return nil, nil // dispatched already: approved by an earlier attempt
	case !errors.Is(err, parent.ErrRunNotFound):
		return nil, fmt.Errorf("worker: run %s: approve child %s: %w", e.id, id, err)
	}
	ask := *req.Approval
	ask.Kind = events.AskApprove
	ask.Title = cmp.Or(ask.Title, asks.ApprovalTitle(req.AgentType))
	if ask.Payload == nil {
		ask.Payload = asks.ApprovalPayload(req.AgentType, callID, id, req.Input)
	}
	answer, err := (&Run{b: e, row: e.row}).Wait(ctx, asks.ApprovalName(id), ask)
	if err != nil {
		return nil, fmt.Errorf("worker: run %s: approve child %s: %w", e.id, id, err)
	}
	if asks.Rejected(answer) {
		return answer, nil
	}
	return nil, nil
}

// rejectedResult is what Child.Await and Run.RunChild return for a child
// whose delegation a person refused (ChildRequest.Approval): a result, not
// an error, so a tool call gets it as its answer. Its Summary says so and
// its Output is {"rejected": true, "answer": <the person's answer>}.
func rejectedResult(childID string, answer json.RawMessage) *parent.Result {
	return &parent.Result{RunID: childID, Summary: asks.RejectedSummary, Output: asks.RejectedOutput(answer)}
}
