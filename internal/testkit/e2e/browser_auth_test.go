package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A parent-worker with API tokens: a fresh browser sees no runs until it
// gives a token; a wrong one is refused; a valid one is kept for the
// session, the list shows the runs and follows them live, and the page's
// own writes (here a cancel) go through with it.
func TestBrowserUIWithAToken(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	const writeTok, readTok = "ui-write-token-0123456789", "ui-read-token-0123456789"
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_HTTP_TOKENS":   "write=" + writeTok + ",read=" + readTok,
		"JETRUN_EMBEDDED_PORT": "-1",
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	api := newAPIClient(t, base)
	api.token = writeTok
	api.dispatch("tok-done", nil, map[string]int{"steps": 2, "stepMs": 10})
	api.dispatch("tok-waiting", nil, map[string]int{"steps": 3, "stepMs": 10, "approveAt": 2})
	api.waitRun("tok-waiting", "to wait for approval", func(s runSummary) bool { return s.WaitingFor != "" })

	b := newBrowser(t, chromium)
	b.do("open the runs list", chromedp.Navigate(base+"/"))
	b.waitTrue("the token dialog", `document.querySelector('[data-testid="token-dialog"]')?.open === true`)
	if n := eval[int](b, `document.querySelectorAll('[data-testid="run-row"]').length`); n != 0 {
		t.Fatalf("the page lists %d runs without a token", n)
	}

	b.do("enter a wrong token",
		chromedp.SendKeys(`[data-testid="token-input"]`, "not-the-token-at-all"),
		chromedp.Click(`[data-testid="token-submit"]`))
	b.waitTrue("the refusal", `document.querySelector('.token-problem').textContent.includes('not valid')`)

	eval[bool](b, `(document.querySelector('[data-testid="token-input"]').value = '', true)`)
	b.do("enter the write token",
		chromedp.SendKeys(`[data-testid="token-input"]`, writeTok),
		chromedp.Click(`[data-testid="token-submit"]`))
	b.waitTrueAcrossReload("the runs listed", rowJS("tok-done", "completed")+" && "+rowJS("tok-waiting", "running"))
	b.waitTrue("the live stream", `document.getElementById('conn').dataset.state === 'live'`)
	if eval[bool](b, `!!document.querySelector('[data-testid="token-dialog"]')?.open`) {
		t.Fatal("the token dialog is still open after a valid token")
	}
	if eval[bool](b, `document.cookie.includes('jetrun_token')`) {
		t.Fatal("the token cookie is readable by scripts")
	}

	// A write from the page, with the session cookie: the run is cancelled
	// and the list follows it live.
	eval[bool](b, `(fetch('/v1/runs/tok-waiting/cancel', {method: 'POST', headers: {'Content-Type': 'application/json'},
		body: '{}'}).then(r => { window.cancelStatus = r.status; }), true)`)
	b.waitTrue("the cancel's answer", `window.cancelStatus !== undefined`)
	if status := eval[int](b, `window.cancelStatus`); status != 200 {
		t.Fatalf("a cancel from the page answered %d", status)
	}
	b.waitTrue("the cancelled run in the list", rowJS("tok-waiting", "aborted"))

	// Another dispatch shows up live.
	api.dispatch("tok-live", nil, map[string]int{"steps": 2, "stepMs": 50})
	b.waitTrue("the new run completed in the list", rowJS("tok-live", "completed"))
}

// waitTrueAcrossReload is waitTrue for a page that reloads meanwhile: a
// poll the reload cut short starts again on the new page.
func (b *browser) waitTrueAcrossReload(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](`(`+expr+`) === true`,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(stepTimeout)))
		cancel()
		if err == nil {
			return
		}
		if transient := strings.Contains(err.Error(), "navigated or closed") || strings.Contains(err.Error(), "Cannot find context"); !transient || time.Now().After(deadline) {
			b.t.Fatalf("waiting for %s (%s): %v\npage: %s", what, expr, err, b.describe())
		}
	}
}
