package metrics_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/metrics"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/meter"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// value gathers m and returns the sample of family name whose labels
// include labels (a histogram's sample count), and whether there is one.
func value(t *testing.T, m *metrics.Metrics, name string, labels ...string) (float64, bool) {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if hasLabels(s, labels) {
				switch {
				case s.Counter != nil:
					return s.Counter.GetValue(), true
				case s.Gauge != nil:
					return s.Gauge.GetValue(), true
				case s.Histogram != nil:
					return float64(s.Histogram.GetSampleCount()), true
				}
			}
		}
	}
	return 0, false
}

func hasLabels(s *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range s.GetLabel() {
			found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}

func waitValue(t *testing.T, m *metrics.Metrics, want float64, name string, labels ...string) {
	t.Helper()
	var got float64
	natstest.Eventually(t, 30*time.Second, func() bool {
		v, ok := value(t, m, name, labels...)
		got = v
		return ok && v == want
	}, "%s %v = %v, want %v", name, labels, got, want)
}

// A worker observed by Metrics on a real server: a completed run, a
// cancelled one and a dispatch on a malformed subject are counted; the
// in-flight gauge returns to zero; the lag collector reads the consumers.
func TestWorkerObserverCounts(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	m := metrics.New()
	jetruntest.StartWorker(t, rt, worker.Config{Observer: m}, func(w *worker.Worker) {
		w.HandleFunc("quick", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			if err := run.Usage(ctx, worker.Usage{InputTokens: 3, OutputTokens: 4, CostMicros: 5, Model: "m1"}); err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: "done"}, nil
		})
		w.HandleFunc("waits", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		})
	})
	m.WatchLag(js, "", nil, 0)
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := engine.From(rt).Store()

	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "quick", RunID: "q1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, store, "q1", 30*time.Second, jetruntest.Final)
	waitValue(t, m, 1, "jetrun_worker_runs_started_total", "agent_type", "quick")
	waitValue(t, m, 1, "jetrun_worker_runs_finished_total", "agent_type", "quick", "status", "completed")
	waitValue(t, m, 0, "jetrun_worker_runs_in_flight", "agent_type", "quick")
	waitValue(t, m, 1, "jetrun_worker_dispatch_to_start_seconds", "agent_type", "quick")
	waitValue(t, m, 3, "jetrun_worker_usage_tokens_total", "agent_type", "quick", "model", "m1", "kind", "input")
	waitValue(t, m, 4, "jetrun_worker_usage_tokens_total", "agent_type", "quick", "model", "m1", "kind", "output")
	waitValue(t, m, 5, "jetrun_worker_usage_cost_micros_total", "agent_type", "quick", "model", "m1")

	if _, err := client.Dispatch(context.Background(), parent.Request{AgentType: "waits", RunID: "w1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, store, "w1", 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	waitValue(t, m, 1, "jetrun_worker_runs_in_flight", "agent_type", "waits")
	if _, err := client.Cancel(context.Background(), "w1", "test"); err != nil {
		t.Fatal(err)
	}
	jetruntest.WaitRow(t, store, "w1", 30*time.Second, jetruntest.Final)
	waitValue(t, m, 1, "jetrun_worker_cancels_total", "agent_type", "waits")
	waitValue(t, m, 1, "jetrun_worker_runs_finished_total", "agent_type", "waits", "status", "aborted")
	waitValue(t, m, 0, "jetrun_worker_runs_in_flight", "agent_type", "waits")

	if _, err := js.Publish(context.Background(), "jetrun.dispatch.quick.extra", []byte(`{"input":1}`)); err != nil {
		t.Fatal(err)
	}
	waitValue(t, m, 1, "jetrun_dead_letters_total", "agent_type", "", "reason", "bad-subject")

	waitValue(t, m, 0, "jetrun_dispatch_pending", "agent_type", "quick")
	waitValue(t, m, 0, "jetrun_dispatch_ack_pending", "agent_type", "waits")
	waitValue(t, m, 0, "jetrun_dispatch_pending_scrape_error")
}

// docs/operations.md's Metrics section lists exactly the jetrun metrics a
// process can serve.
func TestOperationsDocListsEveryMetric(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.WatchLag(nil, "", nil, 0) // described only: never collected here
	descs := make(chan *prometheus.Desc, 256)
	m.Registry().Describe(descs)
	close(descs)
	fqName := regexp.MustCompile(`fqName: "(jetrun_[a-z_]+)"`)
	served := map[string]bool{}
	for d := range descs {
		if mm := fqName.FindStringSubmatch(d.String()); mm != nil {
			served[mm[1]] = true
		}
	}
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Metrics\n")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal("docs/operations.md has no Metrics section")
	}
	documented := map[string]bool{}
	for _, name := range regexp.MustCompile("`(jetrun_[a-z_]+)`").FindAllStringSubmatch(section, -1) {
		documented[name[1]] = true
	}
	for name := range served {
		if !documented[name] {
			t.Errorf("%s is served but not in docs/operations.md", name)
		}
	}
	for name := range documented {
		if !served[name] {
			t.Errorf("docs/operations.md lists %s, which is not served", name)
		}
	}
}

// Series are served at 0 before they count: the reconcile actions from
// New, a worker's or the meter's agent types and the finish handlers when
// the process names them, and an agent type or handler named by nobody
// from its first event on, with all its outcomes (issue 23 item 15).
func TestSeriesAtZeroBeforeTheyCount(t *testing.T) {
	m := metrics.New()
	zero := func(name string, labels ...string) {
		t.Helper()
		if v, ok := value(t, m, name, labels...); !ok || v != 0 {
			t.Errorf("%s %v = %v (present %v), want 0", name, labels, v, ok)
		}
	}
	zero("jetrun_reconcile_runs_touched_total", "action", "recovered")
	zero("jetrun_reconcile_runs_touched_total", "action", "dead-lettered")
	zero("jetrun_reconcile_sweep_errors_total")

	m.WorkerAgentTypes("alpha")
	m.MeterAgentTypes("alpha")
	m.FinishHandlers("audit")
	zero("jetrun_worker_runs_started_total", "agent_type", "alpha")
	zero("jetrun_worker_runs_in_flight", "agent_type", "alpha")
	zero("jetrun_worker_takeovers_total", "agent_type", "alpha")
	zero("jetrun_worker_lease_losses_total", "agent_type", "alpha")
	zero("jetrun_worker_cancels_total", "agent_type", "alpha")
	zero("jetrun_worker_runs_finished_total", "agent_type", "alpha", "status", "lease-lost")
	zero("jetrun_dead_letters_total", "agent_type", "alpha", "reason", "too-deep")
	zero("jetrun_runs_started_total", "agent_type", "alpha")
	zero("jetrun_runs_finished_total", "agent_type", "alpha", "status", "aborted")
	zero("jetrun_finish_deliveries_total", "handler", "audit")
	zero("jetrun_finish_failures_total", "handler", "audit")
	zero("jetrun_finish_dead_lettered_total", "handler", "audit")

	// Known from their first event: every other series of theirs is at 0.
	m.RunStarted(worker.RunStart{RunID: "r1", AgentType: "beta", Attempt: 1})
	m.FinishDelivered("later")
	if err := m.MeterStart(context.Background(), meter.Usage{AgentType: "gamma"}); err != nil {
		t.Fatal(err)
	}
	zero("jetrun_worker_takeovers_total", "agent_type", "beta")
	zero("jetrun_worker_runs_finished_total", "agent_type", "beta", "status", "completed")
	zero("jetrun_finish_dead_lettered_total", "handler", "later")
	zero("jetrun_runs_finished_total", "agent_type", "gamma", "status", "completed")
	if v, _ := value(t, m, "jetrun_worker_runs_started_total", "agent_type", "beta"); v != 1 {
		t.Errorf("beta's start counted %v times", v)
	}
}
