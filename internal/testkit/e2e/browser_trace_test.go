package e2e_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The run page shows the trace of a run's tree as a waterfall: a bar per
// run and per step on one time axis, drawn with its ticks, with status,
// duration, usage (cost in currency units, not raw micros) and each step's
// output, and the tree's totals.
func TestBrowserShowsTheTraceOfATree(t *testing.T) {
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
	nw := start(t, "nestworker", nil, fmt.Sprintf("nats://127.0.0.1:%d", natsPort), "ui-trace")
	nw.waitLog("nestworker serving", 60*time.Second)
	base := "http://" + addr
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post(base+"/v1/runs", "application/json",
		bytes.NewReader([]byte(`{"agentType":"planner","runId":"ui-plan","input":{}}`)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("dispatch: %s: %s", resp.Status, body)
	}

	b := newBrowser(t, chromium)
	b.do("open the planner's page", chromedp.Navigate(base+"/runs/ui-plan"))
	b.waitTrue("the planner to complete", runStatusJS("completed"))
	// The page refetches the trace as the tree changes; the totals say when
	// it has all of it.
	const totals = `(document.querySelector('[data-testid="trace-totals"]')?.innerText || '')`
	b.waitTrue("the tree's totals", totals+`.includes('3 runs · 3 steps · 120 in + 12 out tokens · cost 0.0012')`)
	runs := eval[string](b, `[...document.querySelectorAll('[data-testid="trace-run"]')].map(e => e.dataset.level + ':' + e.dataset.status).join(',')`)
	if runs != "0:completed,1:completed,1:completed" {
		t.Fatalf("run rows %q", runs)
	}
	steps := eval[string](b, `[...document.querySelectorAll('[data-testid="trace-step"]')].map(e => e.dataset.step).join(',')`)
	if steps != "plan,search,search" {
		t.Fatalf("step rows %q", steps)
	}
	// Every row has a bar on the axis, and each run shows its usage.
	if n := eval[int](b, `[...document.querySelectorAll('[data-testid="trace-run"], [data-testid="trace-step"]')].filter(r => {
		const bar = r.querySelector('[data-testid="trace-bar"]');
		return bar && bar.getBoundingClientRect().width > 0 && bar.style.left !== '';
	}).length`); n != 6 {
		t.Fatalf("%d rows with a bar, want 6", n)
	}
	usage := eval[string](b, `[...document.querySelectorAll('[data-testid="trace-run"] [data-testid="trace-usage"]')].map(e => e.innerText).join('|')`)
	if !strings.Contains(usage, "100 in + 10 out tokens · cost 0.001") || strings.Count(usage, "10 in + 1 out tokens · cost 0.0001") != 2 ||
		strings.Contains(usage, "micros") {
		t.Fatalf("run usage %q", usage)
	}
	// Each step shows what it spent.
	stepUsage := eval[string](b, `[...document.querySelectorAll('[data-testid="trace-step"] [data-testid="trace-step-usage"]')].map(e => e.innerText).join('|')`)
	if !strings.Contains(stepUsage, "100 in + 10 out tokens") || strings.Count(stepUsage, "10 in + 1 out tokens") != 2 {
		t.Fatalf("step usage %q", stepUsage)
	}
	// Each step shows its output and when it took place: its duration, or
	// (under a millisecond) when it was stored.
	outputs := eval[string](b, `[...document.querySelectorAll('[data-testid="trace-step"] [data-testid="trace-step-output"]')].map(e => e.innerText).join('|')`)
	if outputs != `→ {"did":"plan"}|→ {"did":"search"}|→ {"did":"search"}` {
		t.Fatalf("step outputs %q", outputs)
	}
	if whens := eval[[]string](b, `[...document.querySelectorAll('[data-testid="trace-step-duration"]')].map(e => e.innerText)`); len(whens) != 3 ||
		slices.ContainsFunc(whens, func(w string) bool {
			return !regexp.MustCompile(`^(\d+ms|\d+(\.\d)?s|stored \+\d+\.\d{3}s)$`).MatchString(w)
		}) {
		t.Fatalf("step durations %q", whens)
	}
	// The axis: ticks from 0, increasing, over the bars' track.
	ticks := eval[[]float64](b, `[...document.querySelectorAll('[data-testid="trace-axis"] [data-testid="trace-tick"]')].map(e => Number(e.dataset.ms))`)
	if len(ticks) < 2 || ticks[0] != 0 || !slices.IsSorted(ticks) || eval[string](b, `document.querySelector('[data-testid="trace-tick"]').innerText`) != "0" {
		t.Fatalf("axis ticks %v", ticks)
	}
	if ok := eval[bool](b, `(() => {
		const axis = document.querySelector('[data-testid="trace-axis"] .wf-track').getBoundingClientRect();
		const track = document.querySelector('[data-testid="trace-run"] .wf-track').getBoundingClientRect();
		return Math.abs(axis.left - track.left) < 1 && Math.abs(axis.width - track.width) < 1;
	})()`); !ok {
		t.Fatal("the axis does not lie over the bars")
	}
	// A child's bar lies within its parent's.
	if ok := eval[bool](b, `(() => {
		const bars = [...document.querySelectorAll('[data-testid="trace-run"] [data-testid="trace-bar"]')].map(e => e.getBoundingClientRect());
		return bars.slice(1).every(c => c.left >= bars[0].left - 1 && c.right <= bars[0].right + 1);
	})()`); !ok {
		t.Fatal("a child's bar lies outside its parent's")
	}
	b.do("refresh the trace", chromedp.Click(`[data-testid="trace-refresh"]`))
	b.waitTrue("the same totals after a refresh", totals+`.includes('3 runs · 3 steps')`)
	b.screenshot("run-page-trace.png")
}
