package e2e_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A Python agent's run page offers "Re-run from here" on each step once
// the run ended: clicking it on step think-3 opens the new run, which
// makes the calls of think-3 and think-4 only (the agent's ledger), shows
// think-1 and think-2 given from the original, and links to the original;
// the original's page links to its re-run.
func TestBrowserRerunFromAStep(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_EXEC_AGENTS":   "agent-py=" + python3(t) + " " + examples(t, "python", "agent.py"),
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_EMBEDDED_PORT": strconv.Itoa(natstest.FreePort(t)),
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	ledger := filepath.Join(t.TempDir(), "ledger")
	body := fmt.Sprintf(`{"agentType":"agent-py","runId":"ui-rr","input":{"turns":4,"delay":0.01,"ledger":%q}}`, ledger)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(base+"/v1/runs", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("dispatch: %s: %s", resp.Status, data)
	}

	b := newBrowser(t, chromium)
	b.do("open the run's page", chromedp.Navigate(base+"/runs/ui-rr"))
	b.waitTrue("the run to complete", runStatusJS("completed"))
	steps := `[...document.querySelectorAll('[data-testid="timeline-entry"][data-kind="step"]')]`
	b.waitTrue("four steps, each with a visible re-run button", steps+`.filter(e => e.querySelector('[data-testid="rerun-step"]')?.offsetParent).length === 4`)
	b.do("re-run from think-3", chromedp.Click(chromedp.CSS(`[data-testid="timeline-entry"][data-step="think-3"] [data-testid="rerun-step"]`)))
	b.waitTrue("the re-run's page", `location.pathname.startsWith('/runs/') && location.pathname !== '/runs/ui-rr'`)
	b.waitTrue("the re-run to complete", runStatusJS("completed"))
	b.waitTrue("its four steps", steps+`.length === 4`)
	given := eval[[]string](b, steps+`.map(e => e.dataset.step + (e.innerText.includes('given from ui-rr') ? ' given' : ''))`)
	if !slices.Equal(given, []string{"think-1 given", "think-2 given", "think-3", "think-4"}) {
		t.Errorf("the re-run's steps: %q", given)
	}
	if from := eval[string](b, `document.querySelector('[data-testid="forked-from"]')?.innerText || ''`); from != "ui-rr" {
		t.Errorf("forked from %q", from)
	}
	b.waitTrue("the trace's four steps", `document.querySelectorAll('[data-testid="trace-step"]').length === 4`)
	rerunID := strings.TrimPrefix(eval[string](b, `location.pathname`), "/runs/")
	b.screenshot("run-page-rerun.png")
	if got := counterLines(t, ledger); len(got) != 12 || strings.Join(got, " ") != "think-1 1 think-2 1 think-3 1 think-4 1 think-3 1 think-4 1" {
		t.Errorf("model calls made (step attempt): %q; want think-1..4 then think-3, think-4 once more", got)
	}
	t.Logf("re-run %s from think-3 made the calls %v", rerunID, counterLines(t, ledger)[8:])

	b.do("open the original", chromedp.Click(chromedp.CSS(`[data-testid="forked-from"]`)))
	b.waitTrue("the original links its re-run", fmt.Sprintf(`[...document.querySelectorAll('[data-testid="fork-link"]')].some(a => a.innerText === %q)`, rerunID))
}
