package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jetrun/jetrun/internal/engine/limits"
)

// Provider limits shared by the fleet (docs/operations.md, "Provider
// limits"): list, read, set, delete, pause.
func (a *api) mountLimits(mux *http.ServeMux, st *limits.Store) {
	if st == nil {
		return
	}
	mux.HandleFunc("GET /v1/limits", func(w http.ResponseWriter, r *http.Request) {
		all, err := st.Statuses(r.Context())
		if err != nil {
			a.limitFail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"limits": all})
	})
	mux.HandleFunc("GET /v1/limits/{name}", func(w http.ResponseWriter, r *http.Request) {
		s, err := st.Status(r.Context(), r.PathValue("name"))
		if err != nil {
			a.limitFail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, s)
	})
	mux.HandleFunc("PUT /v1/limits/{name}", func(w http.ResponseWriter, r *http.Request) {
		spec, err := decodeSpec(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_limit", err.Error())
			return
		}
		if err := st.Put(r.Context(), spec); err != nil {
			a.limitFail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, spec)
	})
	mux.HandleFunc("DELETE /v1/limits/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := st.Delete(r.Context(), r.PathValue("name")); err != nil {
			a.limitFail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/limits/{name}/pause", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			RetryAfterMs int64  `json:"retryAfterMs"`
			Reason       string `json:"reason"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "body: want {\"retryAfterMs\": N, \"reason\": \"...\"}: "+err.Error())
			return
		}
		d := time.Duration(body.RetryAfterMs) * time.Millisecond
		if d <= 0 || d > limits.MaxPause {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("retryAfterMs is %d; want 1 to %d", body.RetryAfterMs, limits.MaxPause.Milliseconds()))
			return
		}
		name := r.PathValue("name")
		if _, err := st.Spec(r.Context(), name); err != nil {
			a.limitFail(w, r, err)
			return
		}
		p, err := st.SetPause(r.Context(), name, time.Now().Add(d), body.Reason, "http")
		if err != nil {
			a.limitFail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
}

func (a *api) limitFail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, limits.ErrUnknownLimit):
		writeError(w, http.StatusNotFound, "unknown_limit", err.Error())
	case errors.Is(err, limits.ErrBadSpec):
		writeError(w, http.StatusBadRequest, "bad_limit", err.Error())
	default:
		a.fail(w, r, err)
	}
}

// specBody is a limit as PUT takes it: pointers, so an explicit zero is
// told from a field left out.
type specBody struct {
	Requests   *int64         `json:"requests"`
	Tokens     *int64         `json:"tokens"`
	Concurrent *int64         `json:"concurrent"`
	WindowMs   *int64         `json:"windowMs"`
	Weights    map[string]int `json:"weights"`
}

func decodeSpec(r *http.Request) (limits.Spec, error) {
	var b specBody
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return limits.Spec{}, fmt.Errorf("body: want {\"requests\", \"tokens\", \"concurrent\", \"windowMs\", \"weights\"}: %w", err)
	}
	spec := limits.Spec{Name: r.PathValue("name"), Weights: b.Weights}
	var errs []error
	for _, f := range []struct {
		name string
		v    *int64
		dst  *int64
	}{{"requests", b.Requests, &spec.Requests}, {"tokens", b.Tokens, &spec.Tokens},
		{"concurrent", b.Concurrent, &spec.Concurrent}, {"windowMs", b.WindowMs, &spec.WindowMs}} {
		if f.v == nil {
			continue
		}
		if *f.v <= 0 {
			errs = append(errs, fmt.Errorf("%s is %d; it must be positive (leave it out to not limit it)", f.name, *f.v))
		}
		*f.dst = *f.v
	}
	if err := errors.Join(errs...); err != nil {
		return spec, fmt.Errorf("%w %s: %w", limits.ErrBadSpec, spec.Name, err)
	}
	return spec, spec.Validate()
}
