package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/parent"
)

// approvalBody is a dispatch's "approval": the nested run (one with a
// "parent") needs a person's approval before it is dispatched
// (parent.Approval). POST /v1/runs then answers once the ask is answered:
// approved, as any dispatch; refused, 200 with rejectedBody. A client that
// goes away while it waits posts again with the same runId.
type approvalBody struct {
	Title   string          `json:"title"`
	Payload json.RawMessage `json:"payload"`
	// Deadline is a duration ("24h"): then Default is the answer.
	Deadline string          `json:"deadline"`
	Default  json.RawMessage `json:"default"`
}

// approval is the parent.Approval of b (nil for none).
func (b *approvalBody) approval() (*parent.Approval, error) {
	if b == nil {
		return nil, nil
	}
	ap := &parent.Approval{Title: b.Title}
	if len(b.Payload) > 0 {
		ap.Payload = b.Payload
	}
	if len(b.Default) > 0 {
		ap.Default = b.Default
	}
	if b.Deadline != "" {
		d, err := time.ParseDuration(b.Deadline)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf(`approval.deadline must be a positive duration such as "24h", got %q`, b.Deadline)
		}
		ap.Deadline = d
	}
	return ap, nil
}

// rejectedBody is the answer to a dispatch whose approval was refused:
// the refusal as the call's result ({"rejected": true, "answer"} as its
// output), not an error.
type rejectedBody struct {
	OK       bool            `json:"ok"`
	RunID    string          `json:"runId"`
	Rejected bool            `json:"rejected"`
	Summary  string          `json:"summary"`
	Output   json.RawMessage `json:"output"`
}

func writeRejected(w http.ResponseWriter, runID string, answer json.RawMessage) {
	writeJSON(w, http.StatusOK, rejectedBody{OK: true, RunID: runID, Rejected: true, Summary: asks.RejectedSummary,
		Output: asks.RejectedOutput(answer)})
}
