package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// calls lists a run's calls with their replies: GET /v1/runs/{id}/calls.
func (a *api) calls(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.row(w, r); !ok {
		return
	}
	calls, err := a.client.Calls(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	type item struct {
		events.Call
		State string        `json:"state"` // pending, answered or failed
		Reply *events.Reply `json:"reply,omitempty"`
	}
	out := make([]item, 0, len(calls))
	for _, c := range calls {
		it := item{Call: c.Call, State: "pending", Reply: c.Reply}
		switch {
		case c.Reply != nil && c.Reply.Error != "":
			it.State = "failed"
		case c.Reply != nil:
			it.State = "answered"
		}
		out = append(out, it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"calls": out})
}

// reply answers a pending call: POST /v1/runs/{id}/calls/{seq}/reply with
// {"output": <any JSON>} or {"error": "…"} (the run gets an error value).
func (a *api) reply(w http.ResponseWriter, r *http.Request) {
	row, ok := a.row(w, r)
	if !ok {
		return
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq <= 0 {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("call sequence must be a positive integer, got %q", r.PathValue("seq")))
		return
	}
	var body struct {
		Output json.RawMessage `json:"output"`
		Error  string          `json:"error"`
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, events.MaxCallBytes+1024))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("reply exceeds %d bytes", events.MaxCallBytes))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "bad_request", "read the reply: "+err.Error())
		return
	}
	if err := json.Unmarshal(data, &body); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "reply is not a JSON object with output or error: "+err.Error())
		return
	}
	var output any
	if len(body.Output) > 0 {
		output = body.Output
	}
	_, err = a.client.Answer(r.Context(), row.ID, seq, output, body.Error)
	switch {
	case errors.Is(err, parent.ErrCallAnswered):
		writeError(w, http.StatusConflict, "already_answered", err.Error())
	case errors.Is(err, parent.ErrCallNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case err != nil:
		a.fail(w, r, err)
	default:
		writeJSON(w, http.StatusAccepted, map[string]any{"runId": row.ID, "seq": seq})
	}
}
