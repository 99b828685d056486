package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jetrun/jetrun/internal/app/rerun"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Re-run and compare (docs/protocol.md, "Re-run and compare"):
//
//	POST /v1/runs/{id}:rerun      {fromStep, input?, steps?, runId?, budget?}: a new run given the steps before fromStep
//	GET  /v1/runs/{a}/diff/{b}    per step equal/changed, usage each side, totals (rerun.Diff)
//	POST /v1/runs:rerun           re-run the runs a filter selects, bounded, and compare each (rerun.BatchRequest)

// rerunBody is the body of POST /v1/runs/{id}:rerun.
type rerunBody struct {
	FromStep string                     `json:"fromStep"`
	Input    json.RawMessage            `json:"input,omitempty"`
	Steps    map[string]json.RawMessage `json:"steps,omitempty"`
	RunID    string                     `json:"runId,omitempty"`
	Budget   *events.TreeBudget         `json:"budget,omitempty"`
}

// runAction serves POST /v1/runs/{id}:<verb>; the verb is "rerun".
func (a *api) runAction(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutSuffix(r.PathValue("id"), ":rerun")
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "POST /v1/runs/{id}:rerun is the only action on a run")
		return
	}
	var body rerunBody
	if !decodeBody(w, r, &body) {
		return
	}
	if events.ValidateID(id) != nil {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no run %q", id))
		return
	}
	req := parent.RerunRequest{FromStep: body.FromStep, RunID: body.RunID, Budget: body.Budget}
	if len(body.Input) > 0 {
		req.Input = body.Input
	}
	if len(body.Steps) > 0 {
		req.Steps = make(map[string]any, len(body.Steps))
		for k, v := range body.Steps {
			req.Steps[k] = v
		}
	}
	d, err := a.client.Rerun(r.Context(), id, req)
	if err != nil {
		a.failRerun(w, r, err)
		return
	}
	status := http.StatusCreated
	if !d.Created {
		status = http.StatusOK
	}
	writeJSON(w, status, runJSON(d.Run))
}

// failRerun answers a refused re-run: 409 for a live run, 422 listing the
// run's steps for a step it never stored, else as fail does.
func (a *api) failRerun(w http.ResponseWriter, r *http.Request, err error) {
	var nse *parent.StepNotStoredError
	switch {
	case errors.As(err, &nse):
		writeJSON(w, http.StatusUnprocessableEntity, struct {
			errorBody
			Steps []string `json:"steps"`
		}{errorBody{Error: err.Error(), Code: "step_not_stored"}, append([]string{}, nse.Stored...)})
	case errors.Is(err, parent.ErrRunLive):
		writeError(w, http.StatusConflict, "run_live", err.Error())
	case errors.Is(err, parent.ErrRunIDTaken):
		writeError(w, http.StatusConflict, "run_id_conflict", err.Error())
	case errors.Is(err, rerun.ErrBadBatch):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
	default:
		a.fail(w, r, err)
	}
}

// diff serves GET /v1/runs/{id}/diff/{other}.
func (a *api) diff(w http.ResponseWriter, r *http.Request) {
	ids := []string{r.PathValue("id"), r.PathValue("other")}
	for _, id := range ids {
		if events.ValidateID(id) != nil {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no run %q", id))
			return
		}
	}
	d, err := rerun.Compare(r.Context(), a.client, ids[0], ids[1])
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// rerunBatch serves POST /v1/runs:rerun: it answers once every re-run
// ended (or the request's context did).
func (a *api) rerunBatch(w http.ResponseWriter, r *http.Request) {
	var req rerun.BatchRequest
	if !decodeBody(w, r, &req) {
		return
	}
	res, err := rerun.Batch(r.Context(), a.client, req)
	if err != nil {
		a.failRerun(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
