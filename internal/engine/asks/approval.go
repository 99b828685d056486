package asks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// Approval before dispatch: a delegation (a nested run) that needs a
// person's approval is asked about before the child is dispatched. This
// file is its one home: the ask's name, title and payload (the child's
// agent type, call id, run id and input), how an answer is read, and the
// result a rejection gives the caller instead of the child's. A Go
// handler waits for the ask as a signal wait of its run (worker.Run.Wait
// on ApprovalName); a dispatch from another service (parent.Client, the
// HTTP API) waits on the ask itself (AwaitApproval), which then is an ask
// answered by way of AskViaDispatch.

// ApprovalName is the signal name of the approval of child run childID.
func ApprovalName(childID string) string {
	name := "approve-" + childID
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

// ApprovalTitle is the title of an approval with none of its own.
func ApprovalTitle(agentType string) string { return "delegate to " + agentType + "?" }

// ApprovalPayload is what an approval shows: the child's agent type, the
// tool call it serves, its run id and its input.
func ApprovalPayload(agentType, callID, childID string, input any) map[string]any {
	return map[string]any{"agentType": agentType, "callId": callID, "childRunId": childID, "input": input}
}

// Rejected reports whether answer refuses a delegation: an approve
// answer {"approved": false, …}. Anything else lets the child run.
func Rejected(answer json.RawMessage) bool {
	var v struct {
		Approved *bool `json:"approved"`
	}
	return json.Unmarshal(answer, &v) == nil && v.Approved != nil && !*v.Approved
}

// RejectedSummary is the summary of a rejected delegation's result.
const RejectedSummary = "the delegation was rejected"

// RejectedOutput is the output a rejected delegation gives its caller in
// place of the child's: {"rejected": true, "answer": <the answer>}.
func RejectedOutput(answer json.RawMessage) json.RawMessage {
	out, _ := json.Marshal(map[string]any{"rejected": true, "answer": answer})
	return out
}

// DispatchApproval is the ask of a dispatch from another service that
// needs approval: run parentID (of tree treeID, agent type parentType)
// delegates child childID. The ask's id is the signal wait's a handler
// would have (SignalID of ApprovalName, 0), so one child has one
// approval whoever asks.
func DispatchApproval(parentID, treeID, parentType, childID string, spec events.Ask) events.Ask {
	spec.ID = SignalID(parentID, ApprovalName(childID), 0)
	spec.RunID, spec.TreeID, spec.AgentType = parentID, treeID, parentType
	spec.Kind, spec.Via, spec.Name = events.AskApprove, events.AskViaDispatch, ApprovalName(childID)
	if spec.AskedAt.IsZero() {
		spec.AskedAt = time.Now().UTC()
	}
	return spec
}

// AwaitApproval stores approval a (an ask of DispatchApproval) unless it
// exists, waits until it is answered (or ctx ends), and settles it
// (received): it returns the answer. A caller that dies while waiting
// calls again with the same child: it finds the same ask, answered or
// not. An ask closed without an answer (its run ended) is ErrClosed.
func (s *Store) AwaitApproval(ctx context.Context, a events.Ask) (json.RawMessage, error) {
	w, err := s.kv.Watch(ctx, a.ID)
	if err != nil {
		return nil, fmt.Errorf("asks: watch approval %s: %w", a.ID, err)
	}
	defer func() { _ = w.Stop() }()
	cur, err := s.Ensure(ctx, a)
	if err != nil {
		return nil, err
	}
	for cur.Status == events.AskOpen {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("asks: await approval %s: %w", a.ID, ctx.Err())
		case e = <-w.Updates():
		}
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		if next, err := Decode(e.Value()); err == nil {
			cur = next
		}
	}
	if cur.Status != events.AskAnswered || cur.Answer == nil {
		return nil, fmt.Errorf("asks: approval %s: %w (%s)", a.ID, ErrClosed, cur.ClosedReason)
	}
	if _, err := s.Received(ctx, a.ID, cur.Answer.Value, cur.Answer.By); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return cur.Answer.Value, nil
}

// FindApproval returns the approval ask of child run childID, whichever
// run it was asked on (DispatchApproval): its key is <parent>.s.<name>.0,
// found by a filter on the bucket's keys, not a scan of the asks. A child
// id long enough for its approval name to be cut short is matched by the
// childRunId of the ask's payload. ErrNotFound when there is none.
func (s *Store) FindApproval(ctx context.Context, childID string) (*events.Ask, error) {
	name := ApprovalName(childID)
	lister, err := s.kv.ListKeysFiltered(ctx, "*.s."+name+".0")
	if err != nil {
		return nil, fmt.Errorf("asks: find the approval of run %s: %w", childID, err)
	}
	defer func() { _ = lister.Stop() }()
	for key := range lister.Keys() {
		a, _, err := s.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if a.Via != events.AskViaDispatch {
			continue
		}
		var p struct {
			ChildRunID string `json:"childRunId"`
		}
		if name == "approve-"+childID || json.Unmarshal(a.Payload, &p) == nil && p.ChildRunID == childID {
			return a, nil
		}
	}
	return nil, fmt.Errorf("asks: the approval of run %s: %w", childID, ErrNotFound)
}
