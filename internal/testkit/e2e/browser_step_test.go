package e2e_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The run page's timeline shows each durable step of a Python agent's run
// (name, size) as it is streamed over SSE.
func TestBrowserShowsSteps(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_EXEC_AGENTS":   "agent-py=" + python3(t) + " " + examples(t, "python", "agent.py"),
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_EMBEDDED_PORT": strconv.Itoa(natstest.FreePort(t)),
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post(base+"/v1/runs", "application/json",
		bytes.NewReader([]byte(`{"agentType":"agent-py","runId":"ui-steps","input":{"turns":3,"delay":0.05}}`)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("dispatch: %s: %s", resp.Status, body)
	}

	b := newBrowser(t, chromium)
	b.do("open the run's page", chromedp.Navigate(base+"/runs/ui-steps"))
	b.waitTrue("the run to complete", runStatusJS("completed"))
	b.waitTrue("three step entries", `[...document.querySelectorAll('[data-testid="timeline-entry"][data-kind="step"]')].map(e => e.dataset.step).join(',') === 'think-1,think-2,think-3'`)
	if n := eval[int](b, `Math.min(...[...document.querySelectorAll('[data-testid="timeline-entry"][data-kind="step"]')].map(e => Number(e.dataset.bytes)))`); n < 10 {
		t.Fatalf("a step entry shows %d bytes", n)
	}
	if text := eval[string](b, `document.querySelector('[data-testid="timeline-entry"][data-kind="step"]').innerText`); !strings.Contains(text, "think-1") || !strings.Contains(text, " B ·") {
		t.Fatalf("step entry text %q", text)
	}
}
