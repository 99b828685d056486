package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/parent"
)

// The web UI shows a run's nested runs grouped by tool call, the chunks it
// passes through from them, and its calls to its caller, pending then
// answered (here from the HTTP API).
func TestBrowserShowsNestedRunsAndCalls(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	natsPort := natstest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_EMBEDDED_PORT": strconv.Itoa(natsPort),
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	nw := start(t, "nestworker", nil, fmt.Sprintf("nats://127.0.0.1:%d", natsPort), "ui-nest")
	nw.waitLog("nestworker serving", 60*time.Second)
	base := "http://" + addr
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(path string, body any, want ...int) {
		t.Helper()
		raw, _ := json.Marshal(body)
		resp, err := hc.Post(base+path, "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		for _, w := range want {
			if resp.StatusCode == w {
				return
			}
		}
		t.Fatalf("POST %s: %s: %s", path, resp.Status, out)
	}

	b := newBrowser(t, chromium)
	const nester = "ui-nester"
	child := parent.RunID(nester, "c1")
	post("/v1/runs", map[string]any{"agentType": "nester", "runId": nester, "input": map[string]int{"steps": 3, "stepMs": 100}},
		http.StatusCreated, http.StatusOK)
	b.do("open the nester's page", chromedp.Navigate(base+"/runs/"+nester))
	b.waitTrue("the nester to complete", runStatusJS("completed"))
	b.waitTrue("the tool call group", `!!document.querySelector('[data-testid="child-group"][data-tool-call="c1"]')`)
	b.waitTrue("the child under it", fmt.Sprintf(
		`document.querySelector('[data-testid="child-group"][data-tool-call="c1"]')?.nextElementSibling?.dataset.runId === %q`, child))
	b.waitTrue("the child's chunks on the nester's timeline", fmt.Sprintf(
		`[...document.querySelectorAll('[data-testid="timeline-entry"][data-kind="child-chunk"]')].some(e => e.dataset.child === %q && e.innerText.includes('step 3'))`, child))
	if n := eval[int](b, `document.querySelectorAll('[data-testid="timeline-entry"][data-kind="chunk"]').length`); n != 0 {
		t.Fatalf("the nester's timeline shows %d chunks of its own", n)
	}
	b.screenshot("run-page-nested.png")

	const caller = "ui-caller"
	post("/v1/runs", map[string]any{"agentType": "caller", "runId": caller, "input": map[string]string{"q": "colour?"}},
		http.StatusCreated, http.StatusOK)
	b.do("open the caller's page", chromedp.Navigate(base+"/runs/"+caller))
	b.waitTrue("the pending call", `document.querySelector('[data-testid="timeline-entry"][data-kind="call"]')?.dataset.state === 'pending'`)
	b.waitTrue("the wait in the header", `document.body.innerText.includes('call:ask')`)
	post("/v1/runs/"+caller+"/calls/1/reply", map[string]any{"output": "blue"}, http.StatusAccepted)
	b.waitTrue("the call answered", `document.querySelector('[data-testid="timeline-entry"][data-kind="call"]')?.dataset.state === 'answered'`)
	b.waitTrue("the reply in the timeline", `!!document.querySelector('[data-testid="timeline-entry"][data-kind="reply"]')`)
	b.waitTrue("the caller to complete", runStatusJS("completed"))
	b.screenshot("run-page-call.png")
}
