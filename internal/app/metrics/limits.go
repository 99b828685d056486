package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetrun/jetrun/internal/engine/limits"
)

// WatchLimits registers a collector that reads, on every scrape, the
// provider limits from their bucket (what every worker last reported in
// the pools): the same from every process, take max. A scrape waits at
// most timeout (0: DefaultLagTimeout).
func (m *Metrics) WatchLimits(st *limits.Store, timeout time.Duration) {
	if timeout <= 0 {
		timeout = DefaultLagTimeout
	}
	m.reg.MustRegister(&limitsCollector{st: st, timeout: timeout})
}

type limitsCollector struct {
	st      *limits.Store
	timeout time.Duration
}

var (
	limitRateDesc = prometheus.NewDesc("jetrun_limit_rate",
		"A provider limit's configured rate: requests or tokens per window, or concurrent calls.", []string{"limit", "kind"}, nil)
	limitWindowDesc = prometheus.NewDesc("jetrun_limit_window_seconds",
		"A provider limit's window.", []string{"limit"}, nil)
	limitWaitingDesc = prometheus.NewDesc("jetrun_limit_waiting",
		"Reservations waiting for room on a limit, across the fleet (as last reported by each worker).", []string{"limit"}, nil)
	limitInUseDesc = prometheus.NewDesc("jetrun_limit_in_use",
		"Concurrent calls granted and not yet settled or released on a limit.", []string{"limit"}, nil)
	limitGrantedDesc = prometheus.NewDesc("jetrun_limit_granted",
		"Reservations granted on a limit by the live workers since each started.", []string{"limit"}, nil)
	limitHoldersDesc = prometheus.NewDesc("jetrun_limit_holders",
		"Workers holding a lease on a limit.", []string{"limit"}, nil)
	limitUsedDesc = prometheus.NewDesc("jetrun_limit_used",
		"Requests or tokens granted on a limit in the current window so far, or in the last whole window.", []string{"limit", "kind", "window"}, nil)
	limitTenantDesc = prometheus.NewDesc("jetrun_limit_tenant_requests",
		"Requests granted on a limit to one tenant, in the current window so far or the last whole window.", []string{"limit", "tenant", "window"}, nil)
	limitPausedDesc = prometheus.NewDesc("jetrun_limit_paused",
		"1 while a limit is paused by a provider's 429.", []string{"limit"}, nil)
	limitPausesDesc = prometheus.NewDesc("jetrun_limit_pauses_total",
		"Pauses of a limit (a provider's 429 reported with its delay).", []string{"limit"}, nil)
	limitErrorDesc = prometheus.NewDesc("jetrun_limit_scrape_error",
		"1 if the last scrape could not read the limits.", nil, nil)
)

func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{limitRateDesc, limitWindowDesc, limitWaitingDesc, limitInUseDesc, limitGrantedDesc,
		limitHoldersDesc, limitUsedDesc, limitTenantDesc, limitPausedDesc, limitPausesDesc, limitErrorDesc} {
		ch <- d
	}
}

func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	all, err := c.st.Statuses(ctx)
	failed := 0.0
	if err != nil {
		failed = 1
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, s := range all {
		name := s.Spec.Name
		gauge(limitRateDesc, float64(s.Spec.Requests), name, "requests")
		gauge(limitRateDesc, float64(s.Spec.Tokens), name, "tokens")
		gauge(limitRateDesc, float64(s.Spec.Concurrent), name, "concurrent")
		gauge(limitWindowDesc, s.Spec.Window().Seconds(), name)
		gauge(limitWaitingDesc, float64(s.Waiting), name)
		gauge(limitInUseDesc, float64(s.InUse), name)
		gauge(limitGrantedDesc, float64(s.Granted), name)
		gauge(limitHoldersDesc, float64(s.Holders), name)
		paused := 0.0
		if s.Paused {
			paused = 1
		}
		gauge(limitPausedDesc, paused, name)
		ch <- prometheus.MustNewConstMetric(limitPausesDesc, prometheus.CounterValue, float64(s.Pause.Count), name)
		windows := map[string]limits.Totals{"current": s.Current}
		if s.Pool.Last != nil {
			windows["last"] = *s.Pool.Last
		}
		for w, t := range windows {
			gauge(limitUsedDesc, float64(t.Requests), name, "requests", w)
			gauge(limitUsedDesc, float64(t.Tokens), name, "tokens", w)
			for tenant, n := range t.Tenants {
				gauge(limitTenantDesc, float64(n), name, tenant, w)
			}
		}
	}
	gauge(limitErrorDesc, failed)
}
