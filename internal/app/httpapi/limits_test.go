package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
)

// Limits are set, read, paused and deleted over HTTP; bad ones are refused
// with the reason and store nothing.
func TestLimitsOverHTTP(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	st, err := limits.Open(context.Background(), env.JS, wire.Namespace("jetrun"), 1)
	if err != nil {
		t.Fatal(err)
	}
	view, err := runview.Start(context.Background(), env.Runtime, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Stop)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Client: env.Client, View: view, Conn: env.Conn, Limits: st}))
	t.Cleanup(srv.Close)

	for body, want := range map[string]string{
		`{"requests": 0, "tokens": 100}`: "requests is 0; it must be positive",
		`{"tokens": -5}`:                 "tokens is -5; it must be positive",
		`{}`:                             "no rate set",
		`{"requests": 1, "rpm": 3}`:      "unknown field",
	} {
		var e struct{ Error, Code string }
		wantStatus(t, do(t, http.MethodPut, srv.URL+"/v1/limits/openai-gpt", body, &e), http.StatusBadRequest)
		if e.Code != "bad_limit" || !strings.Contains(e.Error, want) {
			t.Errorf("PUT %s: %s %q; want bad_limit saying %q", body, e.Code, e.Error, want)
		}
	}
	var none struct{ Limits []limits.Status }
	wantStatus(t, do(t, http.MethodGet, srv.URL+"/v1/limits", "", &none), http.StatusOK)
	if len(none.Limits) != 0 {
		t.Fatalf("bad limits were stored: %+v", none.Limits)
	}

	wantStatus(t, do(t, http.MethodPut, srv.URL+"/v1/limits/openai-gpt",
		`{"requests": 500, "tokens": 200000, "concurrent": 50, "windowMs": 60000, "weights": {"acme": 3}}`, nil), http.StatusOK)
	var got limits.Status
	wantStatus(t, do(t, http.MethodGet, srv.URL+"/v1/limits/openai-gpt", "", &got), http.StatusOK)
	if got.Spec.Requests != 500 || got.Spec.Tokens != 200000 || got.Spec.Concurrent != 50 || got.Spec.Weight("acme") != 3 {
		t.Fatalf("GET after PUT: %+v", got.Spec)
	}
	var e struct{ Error, Code string }
	wantStatus(t, do(t, http.MethodGet, srv.URL+"/v1/limits/claude", "", &e), http.StatusNotFound)
	if e.Code != "unknown_limit" || !strings.Contains(e.Error, "openai-gpt") {
		t.Errorf("unknown limit: %s %q; want unknown_limit naming openai-gpt", e.Code, e.Error)
	}
	wantStatus(t, do(t, http.MethodPost, srv.URL+"/v1/limits/openai-gpt/pause", `{"retryAfterMs": 0}`, nil), http.StatusBadRequest)
	var p limits.Pause
	wantStatus(t, do(t, http.MethodPost, srv.URL+"/v1/limits/openai-gpt/pause", `{"retryAfterMs": 60000, "reason": "429"}`, &p), http.StatusOK)
	wantStatus(t, do(t, http.MethodGet, srv.URL+"/v1/limits/openai-gpt", "", &got), http.StatusOK)
	if !got.Paused || got.Pause.Count != 1 || got.Pause.Reason != "429" {
		t.Fatalf("after a pause: paused=%v %+v", got.Paused, got.Pause)
	}
	wantStatus(t, do(t, http.MethodDelete, srv.URL+"/v1/limits/openai-gpt", "", nil), http.StatusNoContent)
	wantStatus(t, do(t, http.MethodGet, srv.URL+"/v1/limits/openai-gpt", "", nil), http.StatusNotFound)
}
