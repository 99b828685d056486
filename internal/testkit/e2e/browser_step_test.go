package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
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
	// Each step's entry shows its output.
	if out := eval[string](b, `document.querySelector('[data-testid="timeline-entry"][data-kind="step"] [data-testid="step-output"]')?.innerText || ''`); !strings.Contains(out, `"thought"`) {
		t.Fatalf("step entry output %q", out)
	}

	// The trace: a step of an exec child has no duration (its child does not
	// say), so it shows when it was stored, and its output; its usage names
	// tokens only, no cost, since none was reported.
	b.waitTrue("the trace's steps", `document.querySelectorAll('[data-testid="trace-step"]').length === 3`)
	whens := eval[[]string](b, `[...document.querySelectorAll('[data-testid="trace-step-duration"]')].map(e => e.innerText)`)
	for _, w := range whens {
		if !strings.HasPrefix(w, "stored +") {
			t.Fatalf("step durations %q", whens)
		}
	}
	if outs := eval[string](b, `[...document.querySelectorAll('[data-testid="trace-step-output"]')].map(e => e.innerText).join('|')`); strings.Count(outs, `→ {"thought":`) != 3 {
		t.Fatalf("step outputs in the trace %q", outs)
	}
	usage := eval[string](b, `document.querySelector('[data-testid="trace-totals"]').innerText + '|' +
		[...document.querySelectorAll('[data-testid="trace-usage"], [data-testid="trace-step-usage"], [data-testid="usage"]')].map(e => e.innerText).join('|')`)
	if !strings.Contains(usage, "out tokens") || strings.Contains(usage, "micros") || strings.Contains(usage, "cost") {
		t.Fatalf("usage without a cost shows %q", usage)
	}

	// A Go handler's steps (the demo's) know their durations: the trace
	// shows each as the API gives it.
	resp, err = hc.Post(base+"/v1/runs?wait=true", "application/json",
		bytes.NewReader([]byte(`{"agentType":"demo","runId":"ui-demo-steps","input":{"steps":2,"stepMs":120}}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var trace struct {
		Runs []struct {
			Steps []struct {
				DurationMs int64 `json:"durationMs"`
			} `json:"steps"`
		} `json:"runs"`
	}
	resp, err = hc.Get(base + "/v1/runs/ui-demo-steps/trace")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&trace)
	resp.Body.Close()
	if err != nil || len(trace.Runs) != 1 || len(trace.Runs[0].Steps) != 2 {
		t.Fatalf("trace of the demo run: %+v %v", trace, err)
	}
	var want []string
	for _, st := range trace.Runs[0].Steps {
		if st.DurationMs < 120 {
			t.Fatalf("a demo step of 120 ms took %d ms", st.DurationMs)
		}
		want = append(want, shownDuration(st.DurationMs))
	}
	b.do("open the demo run", chromedp.Navigate(base+"/runs/ui-demo-steps"))
	b.waitTrue("its trace's steps", `document.querySelectorAll('[data-testid="trace-step"]').length === 2`)
	if got := eval[[]string](b, `[...document.querySelectorAll('[data-testid="trace-step-duration"]')].map(e => e.innerText)`); !slices.Equal(got, want) {
		t.Fatalf("demo step durations %q, want %q", got, want)
	}
	b.screenshot("run-page-demo-steps.png")
}

// shownDuration is how the web UI writes a duration under a minute: 850ms,
// 4.2s, 12s.
func shownDuration(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%dms", ms)
	case ms < 10000:
		return fmt.Sprintf("%.1fs", float64(ms)/1000)
	}
	return fmt.Sprintf("%ds", ms/1000)
}
