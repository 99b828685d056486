package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The web UI in a real headless Chromium against a real parent-worker: the
// runs list shows live progress, a run page's timeline is rebuilt the same
// after a reload, and a user can cancel and approve runs from the page.
func TestBrowserUI(t *testing.T) {
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
	api := &apiClient{t: t, base: base, http: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true}, // no idle connections left for goleak
	}}

	b := newBrowser(t, chromium)

	// 1. The list loads; a run dispatched now appears live and its progress
	// bar advances.
	b.do("open the runs list", chromedp.Navigate(base+"/"))
	b.waitTrue("the runs list to load", `document.querySelector('[data-testid="runs-table"]')?.dataset.state === 'ready'`)
	const progressRun = "ui-progress"
	api.dispatch(progressRun, nil, map[string]int{"steps": 600, "stepMs": 200}) // cancelled long before its end
	rowSel := fmt.Sprintf(`[data-testid="run-row"][data-run-id=%q]`, progressRun)
	fractionJS := fmt.Sprintf(`Number(document.querySelector(%q)?.querySelector('[data-testid="progress"]')?.dataset.fraction || 0)`, rowSel)
	b.waitTrue("the new run's progress bar to move", fractionJS+` > 0`)
	first := eval[float64](b, fractionJS)
	b.waitTrue("the progress bar to advance", fmt.Sprintf(`%s > %v`, fractionJS, first))
	grown := eval[float64](b, fractionJS)
	if status := eval[string](b, fmt.Sprintf(`document.querySelector(%q).dataset.status`, rowSel)); status != "running" {
		t.Fatalf("row of %s shows status %q, want running", progressRun, status)
	}
	t.Logf("list: %s progress %.3f → %.3f", progressRun, first, grown)

	// 2. Its run page: the timeline; a reload rebuilds the same timeline.
	b.do("click the run in the list", chromedp.Click(chromedp.CSS(rowSel+` a[data-testid="run-link"]`)))
	b.waitTrue("the run page", fmt.Sprintf(`location.pathname === '/runs/%s' && !!document.querySelector('[data-testid="run-status"]')`, progressRun))
	b.waitTrue("history to load", caughtUpJS)
	b.waitTrue("a few steps in the timeline", `document.querySelectorAll('[data-testid="timeline"] [data-testid="timeline-entry"][data-kind="milestone"]').length >= 3`)
	before := b.timeline()
	eval[bool](b, `window.__beforeReload = true`) // gone once the page is reloaded
	b.do("reload the run page", chromedp.Reload())
	b.waitTrue("history to load after the reload", `!window.__beforeReload && `+caughtUpJS)
	b.waitTrue("the timeline to reach where it was", fmt.Sprintf(`[...document.querySelectorAll('[data-testid="timeline-entry"]')].some(e => Number(e.dataset.seq) >= %d)`, before[len(before)-1].Seq))
	after := b.timeline()
	sameTimeline(t, before, after)
	t.Logf("run page: %d timeline entries before the reload, the same %d first after it (of %d)", len(before), len(before), len(after))
	if f := eval[float64](b, `Number(document.querySelector('[data-testid="progress"]').dataset.fraction)`); f <= 0 {
		t.Fatalf("run page progress bar shows fraction %v", f)
	}

	// 3. Cancel it from the page: the page asks first; kept running, then
	// cancelled, it ends aborted, in the header and the timeline.
	b.waitTrue("the cancel button", visibleJS(`[data-testid="cancel"]`))
	// The buttons' own click (not a mouse event at their coordinates): the
	// timeline grows under them while the run streams, and a layout shift
	// between finding a button and pressing it would miss it.
	eval[bool](b, `(document.querySelector('[data-testid="cancel"]').click(), true)`)
	b.waitTrue("the page to ask before cancelling", visibleJS(`[data-testid="confirm-cancel"]`)+
		fmt.Sprintf(` && document.querySelector('[data-testid="confirm-cancel"]').innerText.includes(%q)`, progressRun))
	eval[bool](b, `(document.querySelector('[data-testid="confirm-keep"]').click(), true)`)
	b.waitTrue("the question to go", `!document.querySelector('[data-testid="confirm-cancel"]')`)
	if row := api.get(progressRun); row.Status != "running" || row.CancelRequested {
		t.Fatalf("kept running, %s is %s (cancel requested: %v)", progressRun, row.Status, row.CancelRequested)
	}
	eval[bool](b, `(document.querySelector('[data-testid="cancel"]').click(), true)`)
	b.waitTrue("the question again", visibleJS(`[data-testid="confirm-cancel"]`))
	eval[bool](b, `(document.querySelector('[data-testid="confirm-yes"]').click(), true)`)
	b.waitTrue("the run to end aborted", runStatusJS("aborted"))
	b.waitTrue("the aborted status in the timeline", `!!document.querySelector('[data-testid="timeline-entry"][data-kind="status"][data-status="aborted"]')`)
	b.waitTrue("the cancel button to go", `!`+visibleJS(`[data-testid="cancel"]`))

	// 4. Approve a waiting run from its page: it completes. It has a child
	// and a grandchild, listed on its page as a tree, the child linking
	// back up.
	const approveRun, childRun, grandchild = "ui-approve", "ui-approve-child", "ui-approve-grandchild"
	api.dispatch(approveRun, nil, map[string]int{"steps": 3, "stepMs": 100, "approveAt": 2})
	api.dispatch(childRun, map[string]any{"parent": approveRun, "depth": 1}, map[string]int{"steps": 2, "stepMs": 50})
	api.dispatch(grandchild, map[string]any{"parent": childRun, "depth": 2, "parentToolCallId": "deeper"}, map[string]int{"steps": 2, "stepMs": 50})
	b.do("open the waiting run", chromedp.Navigate(base+"/runs/"+approveRun))
	b.waitTrue("the approve button", visibleJS(`[data-testid="approve"]`))
	b.waitTrue("the waiting signal in the timeline", `!!document.querySelector('[data-testid="timeline-entry"][data-kind="signal"][data-state="waiting"]')`)
	b.do("click approve", chromedp.Click(chromedp.CSS(`[data-testid="approve"]`)))
	b.waitTrue("the run to complete", runStatusJS("completed"))
	b.waitTrue("the received signal in the timeline", `!!document.querySelector('[data-testid="timeline-entry"][data-kind="signal"][data-state="received"]')`)
	b.waitTrue("the timeline to end", `document.querySelector('[data-testid="caught-up"]')?.dataset.state === 'ended'`)
	b.waitTrue("the output", `(document.querySelector('[data-testid="output"]')?.textContent || '').includes('"steps": 3')`)
	b.waitTrue("the child in the children list", fmt.Sprintf(`!!document.querySelector('[data-testid="child"][data-run-id=%q] a')`, childRun))
	b.waitTrue("the grandchild under the child, under its tool call", fmt.Sprintf(
		`document.querySelector('[data-testid="child"][data-run-id=%q] [data-testid="child-group"][data-tool-call="deeper"]')?.nextElementSibling?.dataset.runId === %q`,
		childRun, grandchild))
	b.waitTrue("the tree counted", `document.querySelector('[data-testid="child-count"]')?.textContent === '2'`)
	// A grandchild started while the page is open shows up live.
	const lateGrandchild = "ui-approve-grandchild-2"
	api.dispatch(lateGrandchild, map[string]any{"parent": childRun, "depth": 2, "parentToolCallId": "deeper", "displayOrder": 1},
		map[string]int{"steps": 1, "stepMs": 10})
	b.waitTrue("the late grandchild under the child, live", fmt.Sprintf(
		`!!document.querySelector('[data-testid="child"][data-run-id=%q] [data-testid="child"][data-run-id=%q]')`, childRun, lateGrandchild))
	b.waitTrue("the tree recounted", `document.querySelector('[data-testid="child-count"]')?.textContent === '3'`)
	if eval[bool](b, visibleJS(`[data-testid="approve"]`)) {
		t.Fatal("the approve button is still shown on a completed run")
	}

	// 5. A screenshot of the run page, kept as an artifact.
	b.screenshot("run-page.png")

	// The trace above the children grows a row for the late grandchild
	// when it is fetched again; a click aimed while it grows lands on the
	// wrong line. Click once the trace shows the whole tree, ended.
	b.waitTrue("the trace of the whole tree, ended", `(() => {
		const runs = [...document.querySelectorAll('[data-testid="trace-run"]')];
		return runs.length === 4 && runs.every((r) => r.dataset.status === 'completed');
	})()`)
	b.do("open the child", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="child"][data-run-id=%q] a`, childRun))))
	b.waitTrue("the child's page with a link to its parent", fmt.Sprintf(`location.pathname === '/runs/%s' && document.querySelector('[data-testid="parent-link"]')?.getAttribute('href') === '/runs/%s'`, childRun, approveRun))
	b.waitTrue("the child to complete", runStatusJS("completed"))

	// 6. A long timeline (200 entries and more) collapses by kind: the
	// milestones hide, the rest stays; a second click shows them again.
	const longRun = "ui-long"
	api.dispatch(longRun, nil, map[string]int{"steps": 100, "stepMs": 0})
	b.do("open the long run", chromedp.Navigate(base+"/runs/"+longRun))
	b.waitTrue("the long run to end", `document.querySelector('[data-testid="caught-up"]')?.dataset.state === 'ended'`)
	if n := len(b.timeline()); n < 200 {
		t.Fatalf("the long run's timeline has %d entries", n)
	}
	milestones := `[data-testid="timeline-kind"][data-kind="milestone"]`
	b.waitTrue("a button for the milestones, counted", fmt.Sprintf(`(document.querySelector(%q)?.textContent || '').includes('milestones 100')`, milestones))
	visibleOf := func(kind string) int {
		return eval[int](b, fmt.Sprintf(`[...document.querySelectorAll('[data-testid="timeline-entry"][data-kind=%q]')].filter(e => e.getClientRects().length > 0).length`, kind))
	}
	if visibleOf("milestone") != 100 {
		t.Fatalf("%d milestones shown before collapsing", visibleOf("milestone"))
	}
	b.do("collapse the milestones", chromedp.Click(chromedp.CSS(milestones)))
	b.waitTrue("the milestones hidden", fmt.Sprintf(`document.querySelector(%q).getAttribute('aria-pressed') === 'true'`, milestones))
	if m, c := visibleOf("milestone"), visibleOf("chunk"); m != 0 || c == 0 {
		t.Fatalf("collapsed: %d milestones and %d chunk entries shown", m, c)
	}
	b.screenshot("run-page-collapsed.png")
	b.do("show the milestones again", chromedp.Click(chromedp.CSS(milestones)))
	b.waitTrue("the milestones back", `document.querySelectorAll('[data-testid="timeline-entry"][data-kind="milestone"]:not([hidden])').length === 100`)

	// The list shows every run's outcome, live.
	b.do("back to the list", chromedp.Click(chromedp.CSS(`a[href="/"]`)))
	for id, status := range map[string]string{progressRun: "aborted", approveRun: "completed", childRun: "completed", lateGrandchild: "completed", longRun: "completed"} {
		b.waitTrue(id+" "+status+" in the list", fmt.Sprintf(`document.querySelector('[data-testid="run-row"][data-run-id=%q]')?.dataset.status === %q`, id, status))
	}
	b.screenshot("runs-list.png")
}

const caughtUpJS = `!!document.querySelector('[data-testid="caught-up"]')`

func runStatusJS(status string) string {
	return fmt.Sprintf(`document.querySelector('[data-testid="run-status"]')?.textContent.trim() === %q`, status)
}

func visibleJS(sel string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.getClientRects().length > 0; })()`, sel)
}

// tlEntry is one timeline entry as the page shows it.
type tlEntry struct {
	Seq  int64  `json:"seq"`
	Seqs string `json:"seqs"`
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// sameTimeline checks that after starts with the entries of before: the same
// events, in the same entries, showing the same text. Only the last entry may
// have grown (a chunk block that got more chunks).
func sameTimeline(t *testing.T, before, after []tlEntry) {
	t.Helper()
	if len(after) < len(before) {
		t.Fatalf("after the reload the timeline has %d entries, before it had %d:\nbefore: %v\nafter:  %v", len(after), len(before), seqsOf(before), seqsOf(after))
	}
	for i, e := range before {
		a := after[i]
		if a.Seq != e.Seq || a.Kind != e.Kind {
			t.Fatalf("timeline entry %d is %s #%d after the reload, %s #%d before:\nbefore: %v\nafter:  %v", i, a.Kind, a.Seq, e.Kind, e.Seq, seqsOf(before), seqsOf(after))
		}
		if a.Seqs == e.Seqs && a.Text != e.Text {
			t.Fatalf("timeline entry %d (seq %d) shows %q after the reload, %q before", i, e.Seq, a.Text, e.Text)
		}
		if a.Seqs != e.Seqs && (i != len(before)-1 || !strings.HasPrefix(a.Seqs, e.Seqs+" ") || !strings.HasPrefix(a.Text, e.Text)) {
			t.Fatalf("timeline entry %d (seq %d) holds events %q after the reload, %q before", i, e.Seq, a.Seqs, e.Seqs)
		}
	}
}

func seqsOf(es []tlEntry) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// chromiumPath finds Debian's chromium. A missing browser fails the test:
// make test installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("chromium is not installed (no /usr/bin/chromium, none on PATH): the browser test needs it; install it with `apt-get install -y chromium` (make test does)")
	return ""
}

// browser is a headless Chromium tab driven over the DevTools protocol.
type browser struct {
	t     *testing.T
	ctx   context.Context
	close func() // stops the browser; idempotent
}

// stepTimeout bounds every wait: generous, as the suite runs with -race and
// in parallel; waits poll, so a fast machine never waits long.
const stepTimeout = 30 * time.Second

func newBrowser(t *testing.T, execPath string, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(execPath),
		chromedp.Headless,
		chromedp.NoSandbox, // root in the sandbox
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-default-apps", true),
	}
	opts = append(opts, extra...)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx, chromedp.WithErrorf(func(string, ...any) {}))
	stop := sync.OnceFunc(func() {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_ = chromedp.Cancel(cctx) // closes the browser gracefully and waits for it
		cancel()
		cancelCtx()   // waits for the tab and the browser to be gone
		cancelAlloc() // waits for the process
	})
	// The first Do starts the browser, bound to ctx: no timeout here (the
	// allocator bounds the start itself).
	if err := chromedp.Do(ctx); err != nil {
		stop()
		t.Fatalf("start chromium (%s): %v", execPath, err)
	}
	t.Cleanup(stop)
	return &browser{t: t, ctx: ctx, close: stop}
}

// do runs actions, failing the test with what was being done.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s", what, err, b.describe())
	}
}

// waitTrue polls the page until expr is true.
func (b *browser) waitTrue(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](`(`+expr+`) === true`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(stepTimeout)))
	if err != nil {
		b.t.Fatalf("waiting for %s (%s): %v\npage: %s", what, expr, err, b.describe())
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v\npage: %s", expr, err, b.describe())
	}
	return v
}

// timeline returns the run page's timeline entries.
func (b *browser) timeline() []tlEntry {
	b.t.Helper()
	out := eval[[]tlEntry](b, `[...document.querySelectorAll('[data-testid="timeline"] [data-testid="timeline-entry"]')].map(e => ({
		seq: Number(e.dataset.seq), seqs: e.dataset.seqs || '', kind: e.dataset.kind || '', text: e.innerText,
	}))`)
	if len(out) == 0 {
		b.t.Fatalf("the timeline is empty\npage: %s", b.describe())
	}
	if !slices.IsSortedFunc(out, func(x, y tlEntry) int { return cmp.Compare(x.Seq, y.Seq) }) {
		b.t.Fatalf("timeline entries are out of order: %v", seqsOf(out))
	}
	return out
}

// describe returns the page's URL and visible text, for failure messages.
func (b *browser) describe() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + '\n' + (document.body ? document.body.innerText : '')`))
	if err != nil {
		return fmt.Sprintf("(cannot read the page: %v)", err)
	}
	if len(text) > 3000 {
		text = text[:3000] + "…"
	}
	return text
}

// screenshot saves a full-page PNG to the artifacts directory:
// $JETRUN_ARTIFACTS, else <repo root>/artifacts.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	// Let transitions (a progress bar filling up) finish; endless ones (a
	// pulsing dot) do not count.
	b.waitTrue("animations to settle", `document.getAnimations().every(a => a.playState !== 'running' || a.effect?.getComputedTiming().iterations === Infinity)`)
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is PNG
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifactsDir(b.t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// artifactsDir returns the directory for screenshots and page dumps,
// created if missing: $JETRUN_ARTIFACTS, else <repo root>/artifacts (which
// make clean removes).
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("JETRUN_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "artifacts") // the test runs in internal/testkit/e2e
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// apiClient calls parent-worker's HTTP API.
type apiClient struct {
	t     *testing.T
	base  string
	http  *http.Client
	token string // sent as a bearer token when set
}

// get returns the run's row (GET /v1/runs/{id}).
func (c *apiClient) get(id string) runRow {
	c.t.Helper()
	var r runRow
	c.call("GET", "/v1/runs/"+id, nil, &r)
	return r
}

// runRow is the part of a run's row the browser tests check.
type runRow struct {
	Status          string `json:"status"`
	CancelRequested bool   `json:"cancelRequested"`
}

// dispatch starts a demo run with POST /v1/runs; extra adds fields to the body.
func (c *apiClient) dispatch(id string, extra map[string]any, input any) {
	c.t.Helper()
	body := map[string]any{"agentType": "demo", "runId": id, "input": input}
	for k, v := range extra {
		body[k] = v
	}
	raw, err := json.Marshal(body)
	if err != nil {
		c.t.Fatal(err)
	}
	req, err := http.NewRequest("POST", c.base+"/v1/runs", bytes.NewReader(raw))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("dispatch %s: %v", id, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	// 201 for a new run; 200 when a worker claimed it before the answer.
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		c.t.Fatalf("dispatch %s: %s: %s", id, resp.Status, out)
	}
}
