package mcpserver

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A tools/call can be a delegation of a run (an agent that is itself a
// jetrun run calls a tool): its _meta names the parent run and tool call,
// and can ask that a person approve the delegation before the tool's run
// is dispatched (AG2's approval_required on a delegate tool).
const (
	// MetaParent names the run the call is nested under.
	MetaParent = "io.jetrun/parent"
	// MetaParentToolCallID names the parent's tool call.
	MetaParentToolCallID = "io.jetrun/parentToolCallId"
	// MetaApproval (with MetaParent) makes the call need a person's
	// approval first: true, or {"title": "…"}. A refusal is the call's
	// result ({"rejected": true, "answer": …}), not an error.
	MetaApproval = "io.jetrun/approval"
)

// delegation reads a call's delegation _meta into req.
func delegation(meta mcp.Meta, req *parent.Request) error {
	str := func(key string) (string, error) {
		v, ok := meta[key]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok || s == "" {
			return "", invalidParams("_meta[%q] must be a non-empty string", key)
		}
		return s, nil
	}
	var err error
	if req.Parent, err = str(MetaParent); err != nil {
		return err
	}
	if req.ParentToolCallID, err = str(MetaParentToolCallID); err != nil {
		return err
	}
	v, ok := meta[MetaApproval]
	if !ok || v == false {
		return nil
	}
	var spec struct {
		Title string `json:"title"`
	}
	if v != true {
		b, _ := json.Marshal(v)
		if err := json.Unmarshal(b, &spec); err != nil {
			return invalidParams(`_meta[%q] must be true or {"title": "…"}`, MetaApproval)
		}
	}
	if req.Parent == "" {
		return invalidParams("_meta[%q] needs _meta[%q]: an approval is asked on the parent run", MetaApproval, MetaParent)
	}
	if req.RunID == "" {
		if req.ParentToolCallID == "" {
			return invalidParams("_meta[%q] needs _meta[%q] or _meta[%q], so a call made again finds the same ask",
				MetaApproval, MetaIdempotencyKey, MetaParentToolCallID)
		}
		req.RunID = parent.RunID(req.Parent, req.ParentToolCallID)
	}
	req.Approval = &parent.Approval{Title: spec.Title}
	return nil
}

// rejected is the result of a call whose delegation a person refused.
func rejected(runID string, answer json.RawMessage) *mcp.CallToolResult {
	return completed(&parent.Result{RunID: runID, Summary: asks.RejectedSummary, Output: asks.RejectedOutput(answer)})
}
