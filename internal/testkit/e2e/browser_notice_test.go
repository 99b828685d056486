package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A run page shows the milestone notices its dispatch asked for: the ones
// delivered, and the listed milestones the run did not reach.
func TestBrowserShowsMilestoneNotices(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	hook := newNoticeHook(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":        "demo",
		"JETRUN_HTTP_ADDR":       addr,
		"JETRUN_EMBEDDED_PORT":   "-1",
		"JETRUN_DATA_DIR":        t.TempDir(),
		"JETRUN_FINISH_WEBHOOKS": "hook=" + hook.URL,
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	api := &apiClient{t: t, base: base, http: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true},
	}}
	const id = "ui-notices"
	api.dispatch(id, map[string]any{"detached": map[string]any{"onFinish": "hook", "onMilestones": []string{"step-2", "step-9"}}},
		map[string]int{"steps": 3, "stepMs": 300})

	b := newBrowser(t, chromium)
	b.do("open the run page", chromedp.Navigate(base+"/runs/"+id))
	b.waitTrue("the run to complete", runStatusJS("completed"))
	b.waitTrue("the delivered notice", `[...document.querySelectorAll('[data-testid="notice"]')].some(e => e.textContent.startsWith('step-2: notified'))`)
	b.waitTrue("the milestone not reached", `[...document.querySelectorAll('[data-testid="notice"]')].some(e => e.textContent === 'step-9: not reached')`)
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.answered[id+".milestone.step-2"] != 1 || hook.answered[id+".milestone.step-9"] != 0 {
		t.Fatalf("webhook answers: %v", hook.answered)
	}
}
