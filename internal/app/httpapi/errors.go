package httpapi

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// errorStatus maps an error from the parent API to an HTTP status and an
// error code; an unexpected one is logged (throttled) and answers 503.
func (a *api) errorStatus(r *http.Request, err error) (int, string) {
	switch {
	case errors.Is(err, parent.ErrBadRequest), errors.Is(err, events.ErrInvalidID):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, parent.ErrUnknownAgentType):
		return http.StatusUnprocessableEntity, "unknown_agent_type"
	case errors.Is(err, parent.ErrRunIDConflict):
		return http.StatusConflict, "run_id_conflict"
	case errors.Is(err, runview.ErrBadCursor):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, parent.ErrRunNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, parent.ErrRunEnded):
		return http.StatusConflict, "run_ended"
	case errors.Is(err, parent.ErrKeyBusy):
		return http.StatusConflict, "key_busy"
	case errors.Is(err, parent.ErrConcurrencyLimit):
		return http.StatusTooManyRequests, "concurrency_limit"
	case errors.Is(err, parent.ErrBudgetExceeded):
		return http.StatusConflict, "budget_exceeded"
	case errors.Is(err, parent.ErrDispatchFailed):
		return http.StatusServiceUnavailable, "dispatch_failed"
	case r.Context().Err() != nil:
		// The client went away; nobody reads this.
		return http.StatusServiceUnavailable, "cancelled"
	}
	class := jsfault.Classify(r.Context(), err).String()
	a.logs.Log(r.Context(), a.log, slog.LevelError, "request failed/"+r.Method+" "+r.Pattern+"/"+class, "request failed",
		"method", r.Method, "path", r.URL.Path, "fault", class, "err", err)
	return http.StatusServiceUnavailable, "unavailable"
}
