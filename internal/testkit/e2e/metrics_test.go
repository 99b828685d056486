package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// scrape is a parsed /metrics answer.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics GETs url with token (if set) and parses the answer with the
// Prometheus text parser.
func scrapeMetrics(t *testing.T, url, token string) scrape {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value is the value of the sample of family name whose labels include
// labels (a histogram's sample count), and whether there is one.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// waitMetric scrapes url until family name with labels has value want.
func waitMetric(t *testing.T, url, token string, want float64, name string, labels ...string) {
	t.Helper()
	var got float64
	var ok bool
	natstest.Eventually(t, 30*time.Second, func() bool {
		got, ok = scrapeMetrics(t, url, token).value(name, labels...)
		return ok && got == want
	}, "%s %v at %s: got %v (present %v), want %v", name, labels, url, got, ok, want)
}

// A child-worker with JETRUN_METRICS_ADDR and a parent-worker (metrics on
// its HTTP API, behind a read token) are scraped with the Prometheus text
// parser while a detached run goes from dispatch to delivered finish and a
// malformed dispatch is dead-lettered: the counters follow.
func TestMetricsFollowARun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newHookServer(t)
	childAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	e.childWorker(t, "metrics-child", map[string]string{"JETRUN_METRICS_ADDR": childAddr})
	childURL := "http://" + childAddr + "/metrics"
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	e.parentWorker(t, "metrics-parent", hook.URL, map[string]string{
		"JETRUN_HTTP_ADDR": httpAddr, "JETRUN_HTTP_TOKENS": "read=metrics-reader-token-0123",
	})
	parentURL := "http://" + httpAddr + "/metrics"

	// GET /metrics on the API needs a read token.
	resp, err := http.Get(parentURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without a token: %s, want 401", resp.Status)
	}

	before := scrapeMetrics(t, childURL, "")
	if v, ok := before.value("jetrun_worker_runs_started_total", "agent_type", "demo"); ok && v != 0 {
		t.Fatalf("runs started before any run: %v", v)
	}
	if _, ok := before.value("jetrun_dispatch_pending", "agent_type", "demo"); !ok {
		t.Fatal("child-worker reports no jetrun_dispatch_pending for demo")
	}

	e.detached(t, "metrics-1", 3, 50)
	jetruntest.WaitRow(t, e.store, "metrics-1", 30*time.Second, jetruntest.Delivered)

	waitMetric(t, childURL, "", 1, "jetrun_worker_runs_started_total", "agent_type", "demo")
	waitMetric(t, childURL, "", 1, "jetrun_worker_runs_finished_total", "agent_type", "demo", "status", "completed")
	waitMetric(t, childURL, "", 0, "jetrun_worker_runs_in_flight", "agent_type", "demo")
	waitMetric(t, childURL, "", 1, "jetrun_worker_dispatch_to_start_seconds", "agent_type", "demo")
	waitMetric(t, childURL, "", 1, "jetrun_worker_run_duration_seconds", "agent_type", "demo", "status", "completed")

	waitMetric(t, parentURL, "metrics-reader-token-0123", 1, "jetrun_finish_deliveries_total", "handler", "hook")
	waitMetric(t, parentURL, "metrics-reader-token-0123", 1, "jetrun_runs_started_total", "agent_type", "demo")
	waitMetric(t, parentURL, "metrics-reader-token-0123", 1, "jetrun_runs_finished_total", "agent_type", "demo", "status", "completed")
	waitMetric(t, parentURL, "metrics-reader-token-0123", 0, "jetrun_dispatch_pending", "agent_type", "demo")
	natstest.Eventually(t, 30*time.Second, func() bool {
		n, _ := scrapeMetrics(t, parentURL, "metrics-reader-token-0123").value("jetrun_reconcile_sweep_duration_seconds")
		return n > 0
	}, "the parent-worker reports no reconcile sweep")

	// Every metric the README's example queries use is served.
	served := map[string]bool{}
	for _, sc := range []scrape{scrapeMetrics(t, childURL, ""), scrapeMetrics(t, parentURL, "metrics-reader-token-0123")} {
		for name, f := range sc {
			served[name] = true
			if f.GetType() == dto.MetricType_HISTOGRAM {
				served[name+"_bucket"], served[name+"_sum"], served[name+"_count"] = true, true, true
			}
		}
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, queries, ok := strings.Cut(string(readme), "```promql")
	queries, _, _ = strings.Cut(queries, "```")
	names := regexp.MustCompile(`jetrun_[a-z_]+`).FindAllString(queries, -1)
	if !ok || len(names) < 3 {
		t.Fatalf("README has no promql example queries (found %v)", names)
	}
	for _, name := range names {
		if !served[name] {
			t.Errorf("README query uses %s, which neither binary serves", name)
		}
	}

	// A dispatch that is not JSON is dead-lettered and counted by reason.
	if _, err := e.js.Publish(context.Background(), events.Namespace("").DispatchSubject("demo"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, childURL, "", 1, "jetrun_dead_letters_total", "agent_type", "demo", "reason", "malformed")
}

// Right after start, before any run, the counters and gauges a process
// feeds are served at 0 for what it knows (issue 23 item 15): a
// child-worker's per-agent-type series (every outcome, every dead-letter
// reason), a parent-worker's meter series for the agent types announced
// in the registry, its finish handlers' and its reconciler's actions.
// Prometheus's rate() and increase() miss the first event of a series
// that appears with it.
func TestMetricsAtZeroFromTheStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	childAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	e.childWorker(t, "zero-child", map[string]string{"JETRUN_METRICS_ADDR": childAddr})
	natstest.Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		agents, _ := e.client.Agents(ctx)
		return len(agents) == 1 && agents[0].AgentType == "demo"
	}, "the child-worker did not announce demo")
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	const child, parent = "child-worker", "parent-worker"
	e.parentWorker(t, "zero-parent", "http://127.0.0.1:1/unused", map[string]string{"JETRUN_HTTP_ADDR": httpAddr})

	scrapes := map[string]scrape{
		child: scrapeMetrics(t, "http://"+childAddr+"/metrics", ""), parent: scrapeMetrics(t, "http://"+httpAddr+"/metrics", ""),
	}
	for _, c := range []struct {
		from   string
		name   string
		labels []string
	}{
		{child, "jetrun_worker_runs_started_total", []string{"agent_type", "demo"}},
		{child, "jetrun_worker_runs_in_flight", []string{"agent_type", "demo"}},
		{child, "jetrun_worker_takeovers_total", []string{"agent_type", "demo"}},
		{child, "jetrun_worker_lease_losses_total", []string{"agent_type", "demo"}},
		{child, "jetrun_worker_cancels_total", []string{"agent_type", "demo"}},
		{child, "jetrun_worker_runs_finished_total", []string{"agent_type", "demo", "status", "completed"}},
		{child, "jetrun_worker_runs_finished_total", []string{"agent_type", "demo", "status", "error"}},
		{child, "jetrun_worker_runs_finished_total", []string{"agent_type", "demo", "status", "handed-back"}},
		{child, "jetrun_dead_letters_total", []string{"agent_type", "demo", "reason", "malformed"}},
		{child, "jetrun_dead_letters_total", []string{"agent_type", "demo", "reason", "schema"}},
		{parent, "jetrun_finish_deliveries_total", []string{"handler", "hook"}},
		{parent, "jetrun_finish_failures_total", []string{"handler", "hook"}},
		{parent, "jetrun_finish_dead_lettered_total", []string{"handler", "hook"}},
		{parent, "jetrun_reconcile_runs_touched_total", []string{"action", "recovered"}},
		{parent, "jetrun_reconcile_runs_touched_total", []string{"action", "given-up"}},
		{parent, "jetrun_reconcile_sweep_errors_total", nil},
		{parent, "jetrun_runs_started_total", []string{"agent_type", "demo"}},
		{parent, "jetrun_runs_finished_total", []string{"agent_type", "demo", "status", "completed"}},
		{parent, "jetrun_runs_finished_total", []string{"agent_type", "demo", "status", "interrupted"}},
	} {
		if v, ok := scrapes[c.from].value(c.name, c.labels...); !ok || v != 0 {
			t.Errorf("%s right after start: %s %v = %v (present %v), want 0", c.from, c.name, c.labels, v, ok)
		}
	}
}
