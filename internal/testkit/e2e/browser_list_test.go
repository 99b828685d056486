package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

// The runs list as a new user first sees it: runs exist before the page
// opens, and a fresh browser profile loading / lists every one of them with
// its status and progress as soon as the page has loaded — with a shared
// live worker, without SharedWorker, and with a shared worker that never
// answers — then follows them live. Chromium's own --screenshot and
// --dump-dom modes (no DevTools, no scripted waits) show the same rows.
func TestBrowserRunsListFirstVisit(t *testing.T) {
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

	// Runs that exist before any page opens: finished ones, a child, one
	// that failed, one aborted, and one parked on an approval half way.
	for i := range 3 {
		api.dispatch(fmt.Sprintf("fv-done-%d", i), nil, map[string]int{"steps": i + 1, "stepMs": 10})
	}
	api.dispatch("fv-child", map[string]any{"parent": "fv-done-0", "depth": 1}, map[string]int{"steps": 2, "stepMs": 10})
	api.dispatch("fv-failed", nil, map[string]int{"steps": 3, "stepMs": 10, "failAt": 2})
	api.dispatch("fv-waiting", nil, map[string]int{"steps": 4, "stepMs": 10, "approveAt": 3})
	api.dispatch("fv-aborted", nil, map[string]int{"steps": 2, "stepMs": 10, "approveAt": 1})
	api.waitRun("fv-aborted", "to wait for approval", func(s runSummary) bool { return s.WaitingFor != "" })
	api.call("POST", "/v1/runs/fv-aborted/cancel", map[string]string{"reason": "not needed"}, nil)
	want := api.waitList("", 7, settled)

	// 1. Chromium's own screenshot and DOM dump of a first visit.
	dom := capture(t, chromium, base+"/", "first-visit")
	checkListed(t, "--dump-dom of a first visit", domRows(t, dom), want)
	t.Logf("first visit: %d runs in the DOM Chromium dumped at load", len(want))

	// 2. A fresh profile per variant; the rows are there once the page has
	// loaded (no waiting), then live updates follow.
	variants := []struct {
		name     string
		script   string // run before the page's scripts
		fallback bool   // the page must do without the shared worker
	}{
		{name: "shared worker"},
		{name: "no SharedWorker", script: `delete window.SharedWorker;`, fallback: true},
		{name: "a SharedWorker that never answers", fallback: true, script: `window.SharedWorker = class {
			constructor() { this.port = { postMessage() {}, close() {}, start() {} }; }
		};`},
	}
	for i, v := range variants {
		b := newBrowser(t, chromium)
		if v.script != "" {
			b.onNewDocument(v.script)
		}
		b.do(v.name+": open the runs list", chromedp.Navigate(base+"/"))
		checkListed(t, v.name+": the list as loaded", eval[[]listedRow](b, listedJS), want)
		if got := eval[string](b, `document.querySelector('[data-testid="runs-table"]').dataset.state`); got != "ready" {
			t.Fatalf("%s: the loaded list is in state %q", v.name, got)
		}

		b.waitTrue(v.name+": the live stream", `document.getElementById('conn').dataset.state === 'live'`)
		if fell := eval[bool](b, `jetrun.live.noWorker`); fell != v.fallback {
			t.Fatalf("%s: the page did without the shared worker: %v, want %v", v.name, fell, v.fallback)
		}
		id := fmt.Sprintf("fv-live-%d", i)
		api.dispatch(id, nil, map[string]int{"steps": 3, "stepMs": 100})
		b.waitTrue(v.name+": the new run completed in the list", rowJS(id, "completed")+
			fmt.Sprintf(` && document.querySelector('[data-run-id=%q] [data-testid="progress"]').dataset.fraction === '1'`, id))
		if i == 0 {
			api.call("POST", "/v1/runs/fv-waiting/signals/approve", map[string]bool{"approved": true}, nil)
			b.waitTrue("the approved run completed in the list", rowJS("fv-waiting", "completed"))
		}
		want = api.waitList("", 8+i, settled)
		checkListed(t, v.name+": the list after live updates", eval[[]listedRow](b, listedJS), want)
		b.close()
	}

	// 3. The same first visit once the runs moved on.
	dom = capture(t, chromium, base+"/", "first-visit-later")
	checkListed(t, "--dump-dom of a later first visit", domRows(t, dom), want)
}

// The live connection drops and comes back: the list shows what changed
// meanwhile — a run cleared, one cancelled, one dispatched — though none of
// it came as a live update. The page's parent-worker is killed and
// restarted on the same address while another one, sharing the NATS
// server, makes the changes.
func TestBrowserRunsListAfterReconnect(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	natsPort := natstest.FreePort(t)
	addrA := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	addrB := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	a := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_HTTP_ADDR":     addrA,
		"JETRUN_EMBEDDED_PORT": strconv.Itoa(natsPort),
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	a.waitLog("parent-worker ready", 60*time.Second)
	envB := map[string]string{
		"JETRUN_NATS_URL":  fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		"JETRUN_HTTP_ADDR": addrB,
	}
	b1 := start(t, "parent-worker", envB)
	b1.waitLog("parent-worker ready", 60*time.Second)
	api := newAPIClient(t, "http://"+addrA)

	api.dispatch("rc-keep", nil, map[string]int{"steps": 2, "stepMs": 10})
	api.dispatch("rc-clear", nil, map[string]int{"steps": 2, "stepMs": 10, "approveAt": 1})
	api.dispatch("rc-cancel", nil, map[string]int{"steps": 2, "stepMs": 10, "approveAt": 2})
	api.waitRun("rc-clear", "to wait for approval", func(s runSummary) bool { return s.WaitingFor != "" })
	api.call("POST", "/v1/runs/rc-clear/cancel", nil, nil)
	api.waitList("", 3, settled)

	b := newBrowser(t, chromium)
	b.do("open the runs list", chromedp.Navigate("http://"+addrB+"/"))
	b.waitTrue("the live stream", `document.getElementById('conn').dataset.state === 'live'`)
	for id, status := range map[string]string{"rc-keep": "completed", "rc-clear": "aborted", "rc-cancel": "running"} {
		b.waitTrue(id+" "+status, rowJS(id, status))
	}

	b1.kill()
	b.waitTrue("the page to see the stream drop", `document.getElementById('conn').dataset.state !== 'live'`)
	api.call("DELETE", "/v1/runs?status=aborted", nil, nil)
	api.call("POST", "/v1/runs/rc-cancel/cancel", map[string]string{"reason": "while the page was offline"}, nil)
	api.dispatch("rc-new", nil, map[string]int{"steps": 2, "stepMs": 10, "approveAt": 2})
	want := api.waitList("", 3, settled)
	if ids := idsOf(want); !slices.Equal(ids, []string{"rc-new", "rc-cancel", "rc-keep"}) {
		t.Fatalf("runs after the changes: %v", ids)
	}

	b2 := start(t, "parent-worker", envB)
	b2.waitLog("parent-worker ready", 60*time.Second)
	b.waitTrue("the live stream back", `document.getElementById('conn').dataset.state === 'live'`)
	b.waitTrue("the changes made while offline", rowJS("rc-cancel", "aborted")+` && `+rowJS("rc-new", "running")+
		` && !document.querySelector('[data-run-id="rc-clear"]')`)
	checkListed(t, "the list after the reconnect", eval[[]listedRow](b, listedJS), want)
}

// A list of hundreds of runs: an empty list says how to start a run (and
// the command works); then, with 301 runs, the list pages through all of
// them, filters by status and by agent type (also on a first visit of a
// filtered URL), and a filtered list follows runs that leave the filter.
func TestBrowserRunsListPagingAndFilters(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	natsPort := natstest.FreePort(t)
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN":      "demo",
		"JETRUN_CONCURRENCY":   "100", // every parked run holds a slot
		"JETRUN_HTTP_ADDR":     addr,
		"JETRUN_EMBEDDED_PORT": strconv.Itoa(natsPort),
		"JETRUN_DATA_DIR":      t.TempDir(),
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	base := "http://" + addr
	api := newAPIClient(t, base)

	// 1. Nothing yet: the empty state's command starts a run, which shows
	// up live.
	b := newBrowser(t, chromium)
	b.do("open the empty list", chromedp.Navigate(base+"/"))
	if !eval[bool](b, visibleJS(`[data-testid="empty-state"]`)) {
		t.Fatalf("an empty list shows no empty state\npage: %s", b.describe())
	}
	cmd := eval[string](b, `document.querySelector('[data-testid="empty-command"]').textContent`)
	if !strings.HasPrefix(cmd, "curl ") || !strings.Contains(cmd, base+"/v1/runs") {
		t.Fatalf("the empty state's command is %q", cmd)
	}
	out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("the empty state's command %s: %v\n%s", cmd, err, out)
	}
	var started runSummary
	if err := json.Unmarshal(out, &started); err != nil || started.ID == "" {
		t.Fatalf("the empty state's command answered %s (%v)", out, err)
	}
	b.waitTrue("the run started from the empty state", rowJS(started.ID, "completed"))
	b.waitTrue("the empty state to go", `!`+visibleJS(`[data-testid="empty-state"]`))
	t.Logf("empty state: %s started %s", cmd, started.ID)
	b.close()

	// 2. 300 more runs of two agent types in four statuses, interleaved.
	// "batch" is served by a worker in this process.
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort), nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("batch", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{Summary: "batched"}, nil
		})
	})
	var waiting []string
	for i := range 300 {
		id := fmt.Sprintf("pg-%03d", i)
		switch i % 10 {
		case 0, 1, 2, 3, 4:
			api.dispatch(id, nil, map[string]int{"steps": 1, "stepMs": 0})
		case 5:
			api.dispatch(id, nil, map[string]int{"steps": 2, "stepMs": 0, "failAt": 1})
		case 6, 7:
			api.dispatch(id, nil, map[string]int{"steps": 2, "stepMs": 0, "approveAt": 2})
			waiting = append(waiting, id)
		default:
			api.call("POST", "/v1/runs", map[string]any{"agentType": "batch", "runId": id, "input": map[string]int{"n": i}}, nil)
		}
	}
	api.waitList("", 301, settled)
	for _, id := range waiting[:20] {
		api.call("POST", "/v1/runs/"+id+"/cancel", nil, nil)
	}
	all := api.waitList("", 301, func(s runSummary) bool {
		return settled(s) && (!slices.Contains(waiting[:20], s.ID) || s.Status == "aborted")
	})
	count := map[string]int{}
	for _, s := range all {
		count[s.Status]++
		count[s.AgentType]++
	}
	if want := map[string]int{"completed": 211, "error": 30, "running": 40, "aborted": 20, "demo": 241, "batch": 60}; !maps.Equal(count, want) {
		t.Fatalf("runs by status and agent type: %v, want %v", count, want)
	}

	// 3. The list pages through all of them, 100 at a time.
	b = newBrowser(t, chromium)
	b.do("open the list of 301 runs", chromedp.Navigate(base+"/"))
	checkListed(t, "the first page", eval[[]listedRow](b, listedJS), all[:100])
	countJS := `document.querySelector('.toolbar .count').textContent`
	if got := eval[string](b, countJS); got != "100 of 301 runs" {
		t.Fatalf("the first page counts %q", got)
	}
	moreJS := `document.querySelector('[data-testid="load-more"]').textContent`
	if got := eval[string](b, moreJS); got != "Load more (201 remaining)" {
		t.Fatalf("the load-more button says %q", got)
	}
	for shown := 100; shown < 301; {
		b.do(fmt.Sprintf("load more after %d", shown), chromedp.Click(chromedp.CSS(`[data-testid="load-more"]`)))
		shown = min(shown+100, 301)
		b.waitTrue(fmt.Sprintf("%d rows", shown), fmt.Sprintf(`document.querySelectorAll('[data-testid="run-row"]').length === %d`, shown))
		if shown == 200 {
			if got := eval[string](b, moreJS); got != "Load more (101 remaining)" {
				t.Fatalf("after 200 rows the load-more button says %q", got)
			}
		}
	}
	checkListed(t, "every page", eval[[]listedRow](b, listedJS), all)
	if got := eval[string](b, countJS); got != "301 runs" || eval[bool](b, visibleJS(`[data-testid="load-more"]`)) {
		t.Fatalf("all runs loaded: the count says %q, and a load-more button shows: %v", got, eval[bool](b, visibleJS(`[data-testid="load-more"]`)))
	}

	// 4. Filters: by status (one, then two), back to all, by agent type.
	filtered := func(what, query string) {
		t.Helper()
		want := api.list(query).Runs
		b.waitTrue(what, fmt.Sprintf(`location.search === %q && document.querySelector('[data-testid="runs-table"]').dataset.state === 'ready' && document.querySelectorAll('[data-testid="run-row"]').length === %d`,
			"?"+query, min(len(want), 100)))
		checkListed(t, what, eval[[]listedRow](b, listedJS), want[:min(len(want), 100)])
	}
	b.do("filter error runs", chromedp.Click(chromedp.CSS(`button[data-status="error"]`)))
	filtered("the error runs", "status=error")
	b.do("add aborted runs", chromedp.Click(chromedp.CSS(`button[data-status="aborted"]`)))
	filtered("the error and aborted runs", "status=error%2Caborted")
	b.do("show all statuses", chromedp.Click(chromedp.CSS(`button[data-status=""]`)))
	b.waitTrue("all runs again", `location.search === '' && document.querySelectorAll('[data-testid="run-row"]').length === 100`)
	checkListed(t, "all runs again", eval[[]listedRow](b, listedJS), all[:100])
	b.do("filter agent type batch", chromedp.SendKeys(chromedp.CSS(`input[aria-label="Agent type filter"]`), "batch"))
	filtered("the batch runs", "agentType=batch")
	b.close()

	// 5. A first visit of a filtered URL, as Chromium loads it, then in a
	// fresh profile that follows runs leaving the filter.
	const query = "status=running&agentType=demo"
	running := api.list(query).Runs
	if len(running) != 40 {
		t.Fatalf("%d runs for %s", len(running), query)
	}
	checkListed(t, "--dump-dom of a filtered first visit", domRows(t, capture(t, chromium, base+"/?"+query, "filtered-first-visit")), running)
	b = newBrowser(t, chromium)
	b.do("open the filtered list", chromedp.Navigate(base+"/?"+query))
	checkListed(t, "the filtered list as loaded", eval[[]listedRow](b, listedJS), running)
	if !eval[bool](b, `document.querySelector('button[data-status="running"]').getAttribute('aria-pressed') === 'true' && document.querySelector('input[aria-label="Agent type filter"]').value === 'demo'`) {
		t.Fatalf("the filter controls do not show %s\npage: %s", query, b.describe())
	}
	b.waitTrue("the live stream", `document.getElementById('conn').dataset.state === 'live'`)
	api.call("POST", "/v1/runs/"+running[0].ID+"/cancel", nil, nil)
	api.call("POST", "/v1/runs/"+running[1].ID+"/signals/approve", map[string]bool{"approved": true}, nil)
	b.waitTrue("the cancelled and the approved runs to leave the filtered list", fmt.Sprintf(
		`!document.querySelector('[data-run-id=%q]') && !document.querySelector('[data-run-id=%q]') && %s === '38 runs'`,
		running[0].ID, running[1].ID, countJS))
	checkListed(t, "the filtered list after live updates", eval[[]listedRow](b, listedJS), api.waitList(query, 38, settled))
}

// ---------------------------------------------------------------- helpers

// runSummary is a run as GET /v1/runs lists it.
type runSummary struct {
	ID         string `json:"id"`
	AgentType  string `json:"agentType"`
	Status     string `json:"status"`
	WaitingFor string `json:"waitingFor"`
	Progress   *struct {
		Fraction float64 `json:"fraction"`
	} `json:"progress"`
}

type runPage struct {
	Runs  []runSummary `json:"runs"`
	Total int          `json:"total"`
	Next  string       `json:"next"`
}

// settled reports whether a run stopped changing: it ended, or it is parked
// on an approval with its progress so far on the row.
func settled(s runSummary) bool {
	switch s.Status {
	case "completed", "error", "aborted":
		return true
	}
	return s.WaitingFor == "approve" && s.Progress != nil
}

func idsOf(runs []runSummary) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return ids
}

// listedRow is a row of the runs list as the page shows it.
type listedRow struct {
	ID       string  `json:"id"`
	Status   string  `json:"status"`
	Fraction float64 `json:"fraction"`
	Pct      string  `json:"pct"`
}

// listedJS reads the list's rows, in order.
const listedJS = `[...document.querySelectorAll('[data-testid="run-row"]')].map(tr => ({
	id: tr.dataset.runId, status: tr.dataset.status,
	fraction: Number(tr.querySelector('[data-testid="progress"]').dataset.fraction),
	pct: tr.querySelector('.pct').textContent,
}))`

func rowJS(id, status string) string {
	return fmt.Sprintf(`document.querySelector('[data-testid="run-row"][data-run-id=%q]')?.dataset.status === %q`, id, status)
}

// checkListed checks that the page lists exactly the runs of want, in
// order, each with its status and progress.
func checkListed(t *testing.T, what string, got []listedRow, want []runSummary) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows %v, want the %d runs %v", what, len(got), got, len(want), idsOf(want))
	}
	for i, s := range want {
		w := listedRow{ID: s.ID, Status: s.Status}
		if s.Progress != nil {
			w.Fraction = s.Progress.Fraction
			w.Pct = fmt.Sprintf("%d%%", int(math.Round(s.Progress.Fraction*100)))
		}
		if got[i] != w {
			t.Fatalf("%s: row %d is %+v, want %+v\nrows: %+v", what, i, got[i], w, got)
		}
	}
}

var (
	rowTag  = regexp.MustCompile(`(?s)<tr\b([^>]*\bdata-testid="run-row"[^>]*)>(.*?)</tr>`)
	attrRe  = regexp.MustCompile(`\b(data-[a-z-]+)="([^"]*)"`)
	pctRe   = regexp.MustCompile(`<span class="pct">([^<]*)</span>`)
	fracRe  = regexp.MustCompile(`data-testid="progress"[^>]*\bdata-fraction="([^"]*)"`)
	tbodyRe = regexp.MustCompile(`(?s)<tbody>.*?</tbody>`)
)

// domRows reads the list's rows from a page's serialized DOM.
func domRows(t *testing.T, dom string) []listedRow {
	t.Helper()
	body := tbodyRe.FindString(dom)
	if body == "" {
		t.Fatalf("the DOM has no table body:\n%s", dom)
	}
	var rows []listedRow
	for _, m := range rowTag.FindAllStringSubmatch(body, -1) {
		attrs := map[string]string{}
		for _, a := range attrRe.FindAllStringSubmatch(m[1], -1) {
			attrs[a[1]] = a[2]
		}
		r := listedRow{ID: attrs["data-run-id"], Status: attrs["data-status"]}
		if f := fracRe.FindStringSubmatch(m[2]); f != nil {
			r.Fraction, _ = strconv.ParseFloat(f[1], 64)
		}
		if p := pctRe.FindStringSubmatch(m[2]); p != nil {
			r.Pct = p[1]
		}
		rows = append(rows, r)
	}
	return rows
}

// capture loads url in a fresh headless Chromium (a new profile) with its
// own --screenshot and --dump-dom modes: no DevTools and no scripted waits,
// the page as it is once loaded. It saves <name>.png and <name>.html in
// the artifacts directory and returns the DOM.
func capture(t *testing.T, chromium, url, name string) string {
	t.Helper()
	dir := artifactsDir(t)
	shot := filepath.Join(dir, name+".png")
	_ = os.Remove(shot)
	chromiumCLI(t, chromium, "--screenshot="+shot, url)
	raw, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("chromium --screenshot wrote no %s: %v", shot, err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: %v", shot, err)
	}
	if sz := img.Bounds().Size(); sz.X != 1400 || sz.Y != 700 {
		t.Fatalf("%s is %v, want 1400x700", shot, sz)
	}
	dom := chromiumCLI(t, chromium, "--dump-dom", url)
	if err := os.WriteFile(filepath.Join(dir, name+".html"), []byte(dom), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("first visit: %s, %s", shot, filepath.Join(dir, name+".html"))
	return dom
}

// chromiumCLI runs chromium --headless with a fresh profile and returns its
// standard output. --timeout only bounds a page that never finishes
// loading: the capture happens once the page has loaded.
func chromiumCLI(t *testing.T, chromium string, args ...string) string {
	t.Helper()
	args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-extensions",
		"--user-data-dir=" + t.TempDir(), "--timeout=20000", "--window-size=1400,700"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	// Chromium's helper processes share its process group: kill them all,
	// should it hang.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers left behind, if any
	}
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// onNewDocument runs script in every document the tab loads, before the
// page's own scripts.
func (b *browser) onNewDocument(script string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script}); err != nil {
		b.t.Fatalf("add a script to new documents: %v", err)
	}
}

func newAPIClient(t *testing.T, base string) *apiClient {
	return &apiClient{t: t, base: base, http: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true}, // no idle connections left for goleak
	}}
}

// call sends a JSON request and decodes the answer into out (if not nil);
// an answer other than 2xx fails the test.
func (c *apiClient) call(method, path string, body, out any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json") // writes take JSON only, even without a body
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		c.t.Fatalf("%s %s: %s: %s", method, path, resp.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: %v\n%s", method, path, err, data)
		}
	}
}

// list returns every run GET /v1/runs?query lists, newest first.
func (c *apiClient) list(query string) runPage {
	c.t.Helper()
	var p runPage
	c.call("GET", "/v1/runs?limit=1000&"+query, nil, &p)
	if p.Next != "" {
		c.t.Fatalf("more than 1000 runs listed")
	}
	return p
}

// waitList waits until the listing of query has n runs, each satisfying
// cond, and returns them.
func (c *apiClient) waitList(query string, n int, cond func(runSummary) bool) []runSummary {
	c.t.Helper()
	var last runPage
	natstest.Eventually(c.t, 2*stepTimeout, func() bool {
		last = c.list(query)
		return len(last.Runs) == n && !slices.ContainsFunc(last.Runs, func(s runSummary) bool { return !cond(s) })
	}, "waiting for %d settled runs listed by %q; last listing: %+v", n, query, &last)
	return last.Runs
}

// waitRun waits until run id's summary satisfies cond.
func (c *apiClient) waitRun(id, what string, cond func(runSummary) bool) {
	c.t.Helper()
	var last runSummary
	natstest.Eventually(c.t, 2*stepTimeout, func() bool {
		var p runPage
		c.call("GET", "/v1/runs?limit=1000", nil, &p)
		i := slices.IndexFunc(p.Runs, func(s runSummary) bool { return s.ID == id })
		if i < 0 {
			return false
		}
		last = p.Runs[i]
		return cond(last)
	}, "waiting for %s %s; last: %+v", id, what, &last)
}
