package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// request sends method url with body and the headers hdr ("Host" sets the
// Host header) and returns the status and the error body's code.
func request(t *testing.T, method, url, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e struct{ Code, Error string }
	_ = json.Unmarshal(data, &e)
	if resp.StatusCode >= 400 && e.Error == "" {
		t.Errorf("%s %s: %d without a reason: %s", method, url, resp.StatusCode, data)
	}
	return resp.StatusCode, e.Code
}

// Without tokens (what make run starts), a page of another site cannot
// drive the local API: a cross-site text/plain POST neither creates a run
// nor cancels one, and a DNS-rebound name ("Host: evil.example") reads
// nothing. The UI's own requests, links from elsewhere and curl still
// work. Issue 22 item 3.
func TestGuardRefusesCrossSiteAndRebinding(t *testing.T) {
	t.Parallel()
	b := setupConfig(t, func(c *httpapi.Config) { c.AllowedHosts = []string{"jetrun.example.org"} },
		func(w *worker.Worker) { w.Handle(demo.AgentType, demo.Handler()) })
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	const evil = "http://evil.example"
	dispatch := func(id string) string {
		return `{"agentType":"demo","runId":"` + id + `","input":{"steps":1000,"stepMs":100}}`
	}
	noRow := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if row, _, err := b.store.Get(ctx, id); !errors.Is(err, runstore.ErrRunNotFound) {
			t.Errorf("a refused dispatch left run %s: %+v %v", id, row, err)
		}
	}
	jsonCT := map[string]string{"Content-Type": "application/json"}

	// A run to cancel, dispatched as curl would.
	if code, _ := request(t, "POST", b.url+"/v1/runs", dispatch("g-target"), jsonCT); code != 201 {
		t.Fatalf("a dispatch as curl sends it: %d", code)
	}
	jetruntest.WaitRow(t, b.store, "g-target", 10*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })

	for _, c := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		want                     int
		code                     string
	}{
		// The attacks of issue 22: a form-like text/plain POST from another
		// site (a browser sends Sec-Fetch-Site and Origin with it).
		{"a cross-site text/plain dispatch", "POST", "/v1/runs", dispatch("g-csrf-1"),
			map[string]string{"Content-Type": "text/plain", "Origin": evil, "Sec-Fetch-Site": "cross-site"}, 403, "cross_site"},
		{"a cross-site text/plain cancel", "POST", "/v1/runs/g-target/cancel", `{"reason":"csrf"}`,
			map[string]string{"Content-Type": "text/plain", "Origin": evil, "Sec-Fetch-Site": "cross-site"}, 403, "cross_site"},
		{"a cross-site JSON dispatch", "POST", "/v1/runs", dispatch("g-csrf-2"),
			map[string]string{"Content-Type": "application/json", "Origin": evil, "Sec-Fetch-Site": "cross-site"}, 403, "cross_site"},
		{"a dispatch from another port of localhost", "POST", "/v1/runs", dispatch("g-csrf-3"),
			map[string]string{"Content-Type": "application/json", "Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"}, 403, "cross_site"},
		{"a cross-origin dispatch from a browser without Sec-Fetch-Site", "POST", "/v1/runs", dispatch("g-csrf-4"),
			map[string]string{"Content-Type": "text/plain", "Origin": evil}, 403, "cross_site"},
		{"a dispatch from a sandboxed page (Origin null)", "POST", "/v1/runs", dispatch("g-csrf-5"),
			map[string]string{"Content-Type": "application/json", "Origin": "null"}, 403, "cross_site"},
		{"a text/plain dispatch without browser headers", "POST", "/v1/runs", dispatch("g-csrf-6"),
			map[string]string{"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
		{"a form post", "POST", "/v1/runs/g-target/cancel", "reason=csrf",
			map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"a cancel without a Content-Type", "POST", "/v1/runs/g-target/cancel", "", nil, 415, "unsupported_media_type"},
		{"a clear without a Content-Type", "DELETE", "/v1/runs?all=true", "", nil, 415, "unsupported_media_type"},
		// DNS rebinding: evil.example re-pointed at this server.
		{"a rebound runs list", "GET", "/v1/runs", "", map[string]string{"Host": "evil.example:" + port}, 403, "host_not_allowed"},
		{"a rebound run", "GET", "/v1/runs/g-target", "", map[string]string{"Host": "evil.example"}, 403, "host_not_allowed"},
		{"a rebound page", "GET", "/", "", map[string]string{"Host": "evil.example:" + port, "Sec-Fetch-Site": "same-origin"}, 403, "host_not_allowed"},
		{"a rebound dispatch", "POST", "/v1/runs", dispatch("g-csrf-7"),
			map[string]string{"Host": "evil.example:" + port, "Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}, 403, "host_not_allowed"},
		{"a look-alike of localhost", "GET", "/v1/runs", "", map[string]string{"Host": "localhost.evil.example:" + port}, 403, "host_not_allowed"},
		{"a framed page of another site", "GET", "/", "",
			map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}, 403, "cross_site"},
		{"a cross-site fetch of the list", "GET", "/v1/runs", "",
			map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty", "Origin": evil}, 403, "cross_site"},

		// What still works.
		{"curl's list", "GET", "/v1/runs", "", nil, 200, ""},
		{"the list under localhost", "GET", "/v1/runs", "", map[string]string{"Host": "localhost:" + port}, 200, ""},
		{"the list under [::1]", "GET", "/v1/runs", "", map[string]string{"Host": "[::1]:" + port}, 200, ""},
		{"the list under an allowed name", "GET", "/v1/runs", "", map[string]string{"Host": "JetRun.example.org"}, 200, ""},
		{"health", "GET", "/healthz", "", nil, 200, ""},
		{"the UI page, typed in", "GET", "/", "", map[string]string{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, 200, ""},
		{"a link to a run's page from another site", "GET", "/runs/g-target", "",
			map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, 200, ""},
		{"the UI's dispatch", "POST", "/v1/runs", dispatch("g-ui"), map[string]string{"Content-Type": "application/json",
			"Origin": "http://127.0.0.1:" + port, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}, 201, ""},
		{"a dispatch from an older browser on this page", "POST", "/v1/runs", dispatch("g-old-browser"),
			map[string]string{"Content-Type": "application/json; charset=utf-8", "Origin": "http://127.0.0.1:" + port}, 201, ""},
		{"curl's dispatch", "POST", "/v1/runs", dispatch("g-curl"), jsonCT, 201, ""},
		{"the UI's cancel", "POST", "/v1/runs/g-ui/cancel", `{"reason":"from the UI"}`,
			map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:" + port, "Sec-Fetch-Site": "same-origin"}, 200, ""},
		{"curl's cancel without a body", "POST", "/v1/runs/g-curl/cancel", "", jsonCT, 200, ""},
	} {
		code, errCode := request(t, c.method, b.url+c.path, c.body, c.hdr)
		if code != c.want || errCode != c.code {
			t.Errorf("%s: %s %s answered %d %q, want %d %q", c.name, c.method, c.path, code, errCode, c.want, c.code)
		}
	}
	for _, id := range []string{"g-csrf-1", "g-csrf-2", "g-csrf-3", "g-csrf-4", "g-csrf-5", "g-csrf-6", "g-csrf-7"} {
		noRow(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if row, _, err := b.store.Get(ctx, "g-target"); err != nil || row.Status != events.StatusRunning {
		t.Errorf("the run the refused cancels aimed at: %+v %v, want running", row, err)
	}
}

// JETRUN_HTTP_ALLOWED_HOSTS takes host names only.
func TestCheckAllowedHost(t *testing.T) {
	for h, ok := range map[string]bool{
		"jetrun.example.org": true, "jetrun": true, "10.0.0.5": true,
		"": false, "http://jetrun.example.org": false, "jetrun.example.org:8080": false, "*.example.org": false, "a/b": false,
	} {
		if err := httpapi.CheckAllowedHost(h); (err == nil) != ok {
			t.Errorf("%q: %v", h, err)
		}
	}
}
