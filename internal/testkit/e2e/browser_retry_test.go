package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// retryRow is the part of a run's row the retry test reads.
type retryRow struct {
	Status            string `json:"status"`
	Reason            string `json:"reason"`
	Retryable         bool   `json:"retryable"`
	ChildStillRunning bool   `json:"childStillRunning"`
	Attempt           int    `json:"attempt"`
}

// A run's page once the run ended: a run given up (interrupted,
// retryable) offers Retry, which resumes it from the page (here to its
// end: the approval it waited for was sent meanwhile), and neither it nor
// a run rejected at its approval still reads as waiting, or as running
// "so far" in the trace.
func TestBrowserRetryAndEndedRuns(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":           "demo",
		"JETRUN_HTTP_ADDR":          addr,
		"JETRUN_EMBEDDED_PORT":      "-1",
		"JETRUN_DATA_DIR":           t.TempDir(),
		"JETRUN_RECONCILE_INTERVAL": "500ms",
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	api := newAPIClient(t, base)
	row := func(id string) retryRow {
		var r retryRow
		api.call("GET", "/v1/runs/"+id, nil, &r)
		return r
	}

	// 1. A run parked on an approval past its budget is given up, its
	// child stopped: retryable.
	const given = "ui-given-up"
	api.dispatch(given, map[string]any{"detached": map[string]int{"maxBudgetMs": 1000}},
		map[string]int{"steps": 2, "stepMs": 0, "approveAt": 2})
	natstest.Eventually(t, 2*stepTimeout, func() bool {
		r := row(given)
		return r.Status == "interrupted" && r.Retryable && !r.ChildStillRunning
	}, "%s was not given up", given)
	if r := row(given); r.Reason != "budget-exceeded" || r.Attempt != 1 {
		t.Fatalf("%s given up: %+v", given, r)
	}
	// The approval it waited for, sent now: the next attempt finds it.
	api.call("POST", "/v1/runs/"+given+"/signals/approve", map[string]bool{"approved": true}, nil)

	b := newBrowser(t, chromium)
	b.do("open the run given up", chromedp.Navigate(base+"/runs/"+given))
	b.waitTrue("its status", runStatusJS("interrupted"))
	b.waitTrue("the retry button", visibleJS(`[data-testid="retry"]`))
	b.waitTrue("its trace", `document.querySelectorAll('[data-testid="trace-run"]').length === 1`)
	if d := eval[string](b, `document.querySelector('[data-testid="trace-run-duration"]').innerText`); strings.Contains(d, "so far") {
		t.Fatalf("the trace shows the run given up as running: %q", d)
	}
	pmeta := `document.querySelector('.run-progress .pmeta').innerText`
	if m := eval[string](b, pmeta); strings.Contains(m, "waiting for approval") || !strings.Contains(m, "budget-exceeded") {
		t.Fatalf("the progress line of the run given up: %q", m)
	}
	b.screenshot("run-page-given-up.png")

	eval[bool](b, `(document.querySelector('[data-testid="retry"]').click(), true)`)
	b.waitTrue("the retried run to complete", runStatusJS("completed"))
	b.waitTrue("the retry button to go", `!`+visibleJS(`[data-testid="retry"]`))
	b.waitTrue("the second attempt's end in the timeline",
		`!!document.querySelector('[data-testid="timeline-entry"][data-kind="status"][data-status="completed"]')`)
	b.waitTrue("attempt 2 in the header", `document.querySelector('.run-meta').innerText.includes('attempt 2')`)
	if r := row(given); r.Status != "completed" || r.Attempt != 2 {
		t.Fatalf("%s after the retry: %+v", given, r)
	}
	b.waitTrue("the trace to follow the retry", `document.querySelector('[data-testid="trace-run"]')?.dataset.status === 'completed'`)
	b.screenshot("run-page-retried.png")

	// 2. A run rejected at its approval ends error: its page says why, not
	// that it waits.
	const rejected = "ui-rejected"
	api.dispatch(rejected, nil, map[string]int{"steps": 2, "stepMs": 0, "approveAt": 2})
	api.waitRun(rejected, "to wait for approval", func(s runSummary) bool { return s.WaitingFor != "" })
	b.do("open the waiting run", chromedp.Navigate(base+"/runs/"+rejected))
	b.waitTrue("the reject button", visibleJS(`[data-testid="reject"]`))
	b.do("reject it", chromedp.Click(chromedp.CSS(`[data-testid="reject"]`)))
	b.waitTrue("the run to end error", runStatusJS("error"))
	b.waitTrue("the progress line to say why", pmeta+`.includes('was not approved')`)
	if m := eval[string](b, pmeta); strings.Contains(m, "waiting for approval") {
		t.Fatalf("the rejected run's progress line: %q", m)
	}
	if eval[bool](b, visibleJS(`[data-testid="retry"]`)) {
		t.Fatal("a run that ended error offers a retry")
	}
	b.waitTrue("the trace to show the end", `document.querySelector('[data-testid="trace-run"]')?.dataset.status === 'error' &&
		!document.querySelector('[data-testid="trace-run-duration"]').innerText.includes('so far')`)
	eval[bool](b, `(window.scrollTo(0, 0), true)`)
	b.screenshot("run-page-rejected.png")

	// 3. A cost budget and its overrun read in currency units, as usage
	// does, not in raw micros: each demo step costs 810 micros, the budget
	// is 1,000.
	const capped = "ui-capped"
	api.dispatch(capped, map[string]any{"budget": map[string]int{"costMicros": 1000}}, map[string]int{"steps": 3, "stepMs": 0})
	natstest.Eventually(t, 2*stepTimeout, func() bool { return row(capped).Status == "interrupted" }, "%s was not stopped by its budget", capped)
	b.do("open the run past its budget", chromedp.Navigate(base+"/runs/"+capped))
	b.waitTrue("its status", runStatusJS("interrupted"))
	facts := `document.querySelector('.facts').innerText`
	b.waitTrue("the budget and the overrun in currency units", facts+`.includes('cost 0.001')`+
		` && `+facts+`.includes('cost budget of ui-capped exceeded: used 0.0016 of 0.001')`)
	if f := eval[string](b, facts); strings.Contains(f, "micros") {
		t.Fatalf("the run's details show raw micros:\n%s", f)
	}
	b.screenshot("run-page-budget.png")
}
