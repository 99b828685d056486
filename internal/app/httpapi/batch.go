package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Bounds of POST /v1/runs:batch: past either the whole batch is refused
// with 413.
const (
	// MaxBatchRuns is the most runs one batch dispatches.
	MaxBatchRuns = 1000
	// MaxBatchBodyBytes bounds a batch's body.
	MaxBatchBodyBytes = 8 << 20
)

// batchBody is the body of POST /v1/runs:batch.
type batchBody struct {
	Runs []dispatchBody `json:"runs"`
}

// batchResult is one run's outcome in the response of POST /v1/runs:batch:
// status is what POST /v1/runs would have answered for it alone (201
// started, 200 an existing run, 4xx/5xx with error and code).
type batchResult struct {
	RunID  string   `json:"runId,omitempty"`
	Status int      `json:"status"`
	Run    *runBody `json:"run,omitempty"`
	Error  string   `json:"error,omitempty"`
	Code   string   `json:"code,omitempty"`
}

// dispatchBatch dispatches many runs in one request (parent.DispatchMany):
// 200 with one result per run, in the body's order; a bad run fails alone.
// The request's trace context goes with every run. It never waits for the
// runs to end.
func (a *api) dispatchBatch(w http.ResponseWriter, r *http.Request) {
	var body batchBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBatchBodyBytes))
	if err := dec.Decode(&body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("batch body exceeds %d bytes", MaxBatchBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "bad_request", `body is not a JSON object {"runs": [...]}: `+err.Error())
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad_request", "body has data after the JSON object")
		return
	}
	switch n := len(body.Runs); {
	case n == 0:
		writeError(w, http.StatusBadRequest, "bad_request", `"runs" must hold at least one run`)
		return
	case n > MaxBatchRuns:
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("a batch holds at most %d runs, got %d", MaxBatchRuns, n))
		return
	}
	trace := traceOf(r)
	results := make([]batchResult, len(body.Runs))
	var reqs []parent.Request
	var at []int // index in results of reqs[i]
	for i, b := range body.Runs {
		if len(b.Input) == 0 {
			results[i] = batchResult{RunID: b.RunID, Status: http.StatusBadRequest, Code: "bad_request", Error: `"input" is required`}
			continue
		}
		if b.Approval != nil {
			results[i] = batchResult{RunID: b.RunID, Status: http.StatusBadRequest, Code: "bad_request",
				Error: `"approval" waits for a person: POST /v1/runs one run at a time`}
			continue
		}
		reqs = append(reqs, b.request(trace))
		at = append(at, i)
	}
	for j, res := range a.client.DispatchMany(r.Context(), reqs) {
		out := batchResult{RunID: res.RunID, Status: http.StatusCreated}
		switch {
		case res.Err != nil:
			out.Status, out.Code = a.errorStatus(r, res.Err)
			out.Error = res.Err.Error()
		case !res.Created:
			out.Status = http.StatusOK // an existing run, re-attached
		}
		if res.Run != nil {
			run := runJSON(res.Run)
			out.Run = &run
		}
		results[at[j]] = out
	}
	writeJSON(w, http.StatusOK, map[string][]batchResult{"results": results})
}

// request is the parent request of a dispatch body, carrying trace.
func (body dispatchBody) request(trace events.TraceContext) parent.Request {
	return parent.Request{
		AgentType:        body.AgentType,
		RunID:            body.RunID,
		Input:            body.Input,
		Parent:           body.Parent,
		ParentToolCallID: body.ParentToolCallID,
		DisplayOrder:     body.DisplayOrder,
		Depth:            body.Depth,
		Detached:         body.Detached,
		MaxConcurrent:    body.MaxConcurrent,
		Trace:            trace,
		ConcurrencyKey:   body.ConcurrencyKey,
		Strategy:         body.Strategy,
		Debounce:         time.Duration(body.DebounceMs) * time.Millisecond,
		Budget:           body.Budget,
		Session:          body.Session,
		Tenant:           body.Tenant,
	}
}

// traceOf is the caller's W3C trace context, if any: it goes with the run.
func traceOf(r *http.Request) events.TraceContext {
	return events.TraceContext{
		TraceParent: r.Header.Get(events.HeaderTraceParent), TraceState: r.Header.Get(events.HeaderTraceState),
	}.Valid()
}
