package httpapi_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A JetStream fault shows on /healthz at once, but /readyz rides it out
// for as long as a leader election takes (losing the meta leader's node
// made /healthz answer 503 for about 2 s: a readiness probe would have
// pulled a healthy parent-worker) and says 503 only when it persists;
// /livez answers 200 throughout: the process works.
func TestReadyzRidesOutAShortJetStreamFault(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Conn: nc, Tokens: map[string]httpapi.Role{"t": httpapi.RoleWrite}}))
	defer srv.Close()
	probe := func(path string) (int, map[string]string) {
		var body map[string]string
		resp := do(t, "GET", srv.URL+path, "", &body)
		return resp.StatusCode, body
	}
	for _, p := range []string{"/livez", "/readyz", "/healthz"} {
		if code, body := probe(p); code != 200 || body["status"] != "ok" {
			t.Fatalf("%s = %d %v, without a token and nothing wrong", p, code, body)
		}
	}
	if err := ns.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	faultAt := time.Now()
	natstest.Eventually(t, 10*time.Second, func() bool {
		code, _ := probe("/healthz")
		return code == 503
	}, "healthz did not become 503 without JetStream")
	code, body := probe("/readyz")
	if time.Since(faultAt) < 8*time.Second && (code != 200 || body["pending"] == "") {
		t.Fatalf("readyz %s into the fault = %d %v; want 200 with the pending fault", time.Since(faultAt), code, body)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		code, body = probe("/readyz")
		return code == 503
	}, "readyz did not become 503 when the fault persisted")
	if body["reason"] == "" {
		t.Fatalf("readyz = %v; want a reason", body)
	}
	if code, body := probe("/livez"); code != 200 {
		t.Fatalf("livez = %d %v while the process works", code, body)
	}
}
