package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The runs list searches by run id: typing a part of an id (any case)
// lists the runs whose id contains it, kept in the URL and followed live;
// Enter on a listed id opens its run.
func TestBrowserSearchesRunsByID(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_EMBEDDED_PORT": "-1",
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	api := newAPIClient(t, base)
	for _, id := range []string{"order-17-a", "Order-17-b", "refund-3", "order-18"} {
		api.dispatch(id, nil, map[string]int{"steps": 1, "stepMs": 0})
	}
	api.waitList("", 4, settled)

	b := newBrowser(t, chromium)
	b.do("open the runs list", chromedp.Navigate(base+"/"))
	b.waitTrue("the four runs", `document.querySelectorAll('[data-testid="run-row"]').length === 4`)
	listed := `[...document.querySelectorAll('[data-testid="run-row"]')].map(r => r.dataset.runId).sort().join(',')`
	b.do("search for ORDER-17", chromedp.SendKeys(`[data-testid="search"]`, "ORDER-17"))
	b.waitTrue("the runs whose id contains it", listed+` === 'Order-17-b,order-17-a'`)
	if q := eval[string](b, `new URLSearchParams(location.search).get('q')`); q != "ORDER-17" {
		t.Fatalf("the URL keeps the search as %q", q)
	}
	// A run that matches, dispatched now, shows up; one that does not, not.
	api.dispatch("order-17-c", nil, map[string]int{"steps": 1, "stepMs": 0})
	api.dispatch("refund-17", nil, map[string]int{"steps": 1, "stepMs": 0})
	b.waitTrue("the new match, live", listed+` === 'Order-17-b,order-17-a,order-17-c'`)
	b.waitTrue("the count", `document.querySelector('.toolbar .count').innerText === '3 runs'`)
	b.screenshot("runs-list-search.png")

	// Reloaded, the page lists the same (the server's first page embeds the search).
	b.do("reload", chromedp.Reload())
	b.waitTrue("the search kept across a reload", listed+` === 'Order-17-b,order-17-a,order-17-c'`+
		` && document.querySelector('[data-testid="search"]').value === 'ORDER-17'`)

	eval[bool](b, `(document.querySelector('[data-testid="search"]').value = '', true)`)
	b.do("search for an exact id and press Enter", chromedp.SendKeys(`[data-testid="search"]`, "refund-3\r"))
	b.waitTrue("its run page", `location.pathname === '/runs/refund-3' && `+runStatusJS("completed"))
}

// A browser without a token meets the token dialog alone: the calls the
// list makes meanwhile (refused, 401) raise no error toasts, let alone two
// identical ones, behind it.
func TestBrowserTokenDialogWithoutErrorToasts(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_HTTP_TOKENS":   "read=toast-read-token-0123456789",
		"JETRUN_EMBEDDED_PORT": "-1",
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)

	b := newBrowser(t, chromium)
	// Count the page's refused calls, to know the list has asked more than once.
	b.onNewDocument(`window.__refused = 0;
		const realFetch = window.fetch;
		window.fetch = async (...args) => { const r = await realFetch(...args); if (r.status === 401) window.__refused++; return r; };`)
	b.do("open the runs list", chromedp.Navigate("http://"+addr+"/"))
	b.waitTrue("the token dialog", `document.querySelector('[data-testid="token-dialog"]')?.open === true`)
	b.waitTrue("the list to have asked twice, refused", `window.__refused >= 2`)
	if toasts := eval[[]string](b, `[...document.querySelectorAll('#toasts .toast')].map(t => t.innerText)`); len(toasts) != 0 {
		t.Fatalf("toasts behind the token dialog: %q", toasts)
	}
	b.screenshot("token-dialog.png")
}
