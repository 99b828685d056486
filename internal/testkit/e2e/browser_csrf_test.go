package e2e_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A page of another site, open in the operator's browser, cannot drive a
// parent-worker without tokens (what make run starts), nor read it by
// re-pointing its own name at 127.0.0.1 (issue 22 item 3). Chromium
// resolves evil.example to 127.0.0.1, as a rebinding DNS server would.
// The page's form posts a run as text/plain, its script cancels one; both
// are refused and change nothing. The evil.example name reads nothing.
func TestBrowserCrossSitePageCannotDriveTheAPI(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	port := natstest.FreePort(t)
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_HTTP_ADDR":     fmt.Sprintf("127.0.0.1:%d", port),
		"JETRUN_EMBEDDED_PORT": "-1",
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	api := newAPIClient(t, base)
	api.dispatch("x-target", nil, map[string]int{"steps": 1000, "stepMs": 100})
	api.waitRun("x-target", "to run", func(s runSummary) bool { return s.Status == "running" })

	// The other site's page: a form that posts a run as text/plain (its
	// one field spells JSON) into a frame, and a script that cancels one.
	page := fmt.Sprintf(`<!doctype html><title>cat pictures</title>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink" action="%[1]s/v1/runs">
<input name='{"agentType":"demo","runId":"x-csrf","input":{"steps":1,"stepMs":1},"pad":"' value='"}'>
</form>
<script>
const sink = document.getElementById('sink');
sink.addEventListener('load', () => {
  try { sink.contentWindow.location.href; } catch { window.formDone = true; } // the answer, from the API's origin
});
document.getElementById('f').submit();
fetch('%[1]s/v1/runs/x-target/cancel', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
  body: '{"reason":"csrf"}'}).then(() => { window.cancelDone = true; }, () => { window.cancelDone = true; });
</script>`, base)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	evilPort := ln.Addr().(*net.TCPAddr).Port

	b := newBrowser(t, chromium, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	b.do("open the other site's page", chromedp.Navigate(fmt.Sprintf("http://evil.example:%d/", evilPort)))
	b.waitTrue("the form's post and the script's cancel", `window.formDone === true && window.cancelDone === true`)

	// The same parent-worker under the re-pointed name.
	b.do("open the API under evil.example", chromedp.Navigate(fmt.Sprintf("http://evil.example:%d/v1/runs", port)))
	if text := eval[string](b, `document.body.innerText`); strings.Contains(text, "x-target") || !strings.Contains(text, "host_not_allowed") {
		t.Errorf("GET /v1/runs under evil.example showed:\n%s", text)
	}

	// Nothing changed: no run x-csrf, x-target still running.
	if page := api.list(""); len(page.Runs) != 1 || page.Runs[0].ID != "x-target" || page.Runs[0].Status != "running" {
		t.Errorf("after the other site's page the runs are %+v, want x-target running alone", page.Runs)
	}
}
