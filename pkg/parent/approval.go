package parent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// Approval makes a nested run (a Request with a Parent) need a person's
// approval before it is dispatched: an approve ask of the parent run,
// <parent>.s.approve-<runId>.0, showing the child's agent type, call id,
// run id and input, listed in the asks inbox. Dispatch and Run wait for
// the answer (or ctx): approved, the run is dispatched; refused
// ({"approved": false, …}), nothing is dispatched, and the refusal comes
// back as a result, not an error (Dispatched.Rejected; Run's Result
// {"rejected": true, "answer": …}). A caller that goes away while it
// waits calls again with the same RunID: it finds the same ask. A run id
// that has a run already is not asked about again.
type Approval struct {
	// Title is the line shown ("delegate to <agent type>?" by default).
	Title string
	// Payload is what the person approves (by default the child's agent
	// type, call id, run id and input).
	Payload any
	// Deadline, if set, is how long the ask waits for a person; then
	// Default is the answer (by "deadline").
	Deadline time.Duration
	Default  any
}

// rejected is the error of c.dispatch for a dispatch a person refused:
// Dispatch and Run turn it into their result.
type rejected struct {
	runID  string
	answer json.RawMessage
}

func (r *rejected) Error() string {
	return "parent: the delegation of run " + r.runID + " was rejected"
}

// approve asks for the approval of dispatch d (req.Approval) and waits
// for the answer: a *rejected error when refused, nil when approved or
// when d's run exists already.
func (c *Client) approve(ctx context.Context, req Request, d events.Dispatch) error {
	switch {
	case d.Parent == "":
		return fmt.Errorf("%w: an approval needs a parent run", ErrBadRequest)
	case req.RunID == "":
		return fmt.Errorf("%w: an approval needs a run id (a caller that asks again finds the same ask)", ErrBadRequest)
	}
	_, _, err := c.lookup(ctx, d.RunID)
	switch {
	case err == nil:
		return nil // dispatched already: approved before
	case !errors.Is(err, runstore.ErrRunNotFound):
		return fmt.Errorf("parent: approve run %s: %w", d.RunID, err)
	}
	prow, _, err := c.lookup(ctx, d.Parent)
	if err != nil {
		return fmt.Errorf("parent: approve run %s: parent %s: %w", d.RunID, d.Parent, err)
	}
	ap := req.Approval
	spec := events.Ask{Title: cmp.Or(ap.Title, asks.ApprovalTitle(req.AgentType))}
	var payload any = asks.ApprovalPayload(req.AgentType, d.ParentToolCallID, d.RunID, d.Input)
	if ap.Payload != nil {
		payload = ap.Payload
	}
	if spec.Payload, err = json.Marshal(payload); err != nil {
		return fmt.Errorf("%w: approval payload: %w", ErrBadRequest, err)
	}
	if ap.Deadline > 0 {
		at := time.Now().UTC().Add(ap.Deadline)
		spec.Deadline = &at
		var def any = map[string]bool{"approved": false}
		if ap.Default != nil {
			def = ap.Default
		}
		if spec.Default, err = json.Marshal(def); err != nil {
			return fmt.Errorf("%w: approval default: %w", ErrBadRequest, err)
		}
	}
	a := asks.DispatchApproval(prow.ID, cmp.Or(prow.Root, prow.ID), prow.AgentType, d.RunID, spec)
	answer, err := c.rt.Asks().AwaitApproval(ctx, a)
	if err != nil {
		return fmt.Errorf("parent: approve run %s: %w", d.RunID, err)
	}
	if asks.Rejected(answer) {
		return &rejected{runID: d.RunID, answer: answer}
	}
	return nil
}
