package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The limits page lists the limits JETRUN_LIMITS set at start and one set
// over HTTP, and shows a pause as it happens.
func TestBrowserLimitsPage(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_EMBEDDED_PORT": "-1",
		"JETRUN_DATA_DIR":      t.TempDir(),
		"JETRUN_LIMITS":        "openai-gpt:requests=500,tokens=200000,concurrent=50,window=1m,weight.acme=3",
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	api := newAPIClient(t, base)
	api.call("PUT", "/v1/limits/claude", map[string]any{"concurrent": 8}, nil)

	b := newBrowser(t, chromium)
	b.do("open the limits page", chromedp.Navigate(base+"/limits"))
	row := func(name string) string { return fmt.Sprintf(`document.querySelector('[data-limit=%q]')`, name) }
	b.waitTrue("both limits listed", row("openai-gpt")+` && `+row("claude")+` !== null`)
	if got := eval[string](b, row("openai-gpt")+`.textContent`); !containsAll(got, "0 / 500", "0 / 200,000", "0 / 50", "60 s") {
		t.Errorf("openai-gpt row: %q", got)
	}
	api.call("POST", "/v1/limits/openai-gpt/pause", map[string]any{"retryAfterMs": 60000, "reason": "provider 429"}, nil)
	b.waitTrue("the pause shown", row("openai-gpt")+`.querySelector('[data-testid="paused"]').textContent.includes('provider 429')`)
	if got := eval[string](b, row("claude")+`.querySelector('[data-testid="paused"]').textContent`); got != "—" {
		t.Errorf("claude shows a pause: %q", got)
	}
	b.screenshot("limits-page")
}

// containsAll reports whether s contains every one of parts.
func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
