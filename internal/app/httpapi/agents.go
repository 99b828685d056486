package httpapi

import (
	"errors"
	"net/http"

	"github.com/jetrun/jetrun/internal/engine/registry"
)

// agents serves GET /v1/agents: {"agents": [...]}.
func (a *api) agents(w http.ResponseWriter, r *http.Request) {
	list, err := a.client.Agents(r.Context())
	if err != nil {
		a.log.WarnContext(r.Context(), "list agents", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": list})
}

// tools serves GET /v1/tools?format=openai|anthropic|mcp.
func (a *api) tools(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if _, err := registry.Tools(nil, format); errors.Is(err, registry.ErrUnknownFormat) {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	list, err := a.client.Agents(r.Context())
	if err != nil {
		a.log.WarnContext(r.Context(), "list agents", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	tools, err := registry.Tools(list, format)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, tools)
}
