package httpapi

import (
	"net/http"
	"sync"
	"time"
)

// readyGrace is how long NATS may be away or JetStream may not answer
// before /readyz says the process cannot serve: longer than a JetStream
// leader election (a few seconds), so losing one node of a cluster —
// the meta leader, say — does not pull a healthy parent-worker out of a
// load balancer.
const readyGrace = 10 * time.Second

// probes serves the orchestrator probes ahead of next, without
// authentication (they carry no data):
//
//	GET /livez   200 while the process serves HTTP: restart it only when this fails
//	GET /readyz  200 while it can serve: NATS connected and JetStream answering,
//	             allowing a fault shorter than readyGrace; else 503 with the reason
//
// /healthz says what holds right now, for people and monitoring.
func probes(a *api, next http.Handler) http.Handler {
	rd := &readiness{api: a}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		switch r.URL.Path {
		case "/livez":
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		case "/readyz":
			rd.serve(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// readiness remembers when the process last could serve.
type readiness struct {
	api *api

	mu   sync.Mutex
	okAt time.Time // the last check that found NATS connected and JetStream answering
}

func (rd *readiness) serve(w http.ResponseWriter, r *http.Request) {
	a := rd.api
	reason := ""
	switch {
	case a.conn == nil || !a.conn.IsConnected():
		reason = "not connected to NATS"
	default:
		if err := a.probe.check(r.Context(), a.conn); err != nil {
			reason = "JetStream does not answer: " + err.Error()
		}
	}
	now := time.Now()
	rd.mu.Lock()
	if reason == "" {
		rd.okAt = now
	}
	okAt := rd.okAt
	rd.mu.Unlock()
	since := now.Sub(okAt)
	switch {
	case reason == "":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case !okAt.IsZero() && since < readyGrace:
		// One election, a reconnect: ride it out.
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "pending": reason})
	default:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{
			"status": "unavailable", "reason": reason})
	}
}
