// Package metrics exposes what jetrun's components do as Prometheus
// metrics. A Metrics holds its own registry (no global state): it
// implements worker.Observer, finish.Observer and reconcile.Observer, gives
// meter hooks for the cluster-wide run counters, and serves /metrics.
//
// Counters count what this process saw; sum them across processes. A
// counter or gauge is served at 0 from the start for every label value
// known then (outcomes, reasons, actions; the agent types and finish
// handlers the process is told of), and for an agent type or handler seen
// later from its first event on, so rate() and increase() see every event.
// Histograms appear with their first observation. The
// run counters fed by the meter (jetrun_runs_*) are cluster-wide but split
// between the processes that meter (they share one consumer), so they too
// are summed. Gauges that read JetStream (jetrun_dispatch_pending) are read
// on scrape, bounded by a timeout, and are the same from every process:
// take max.
package metrics

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/meter"
	"github.com/jetrun/jetrun/pkg/reconcile"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Label values never come from dispatch payloads: agent types, handler
// names and statuses are validated tokens, reasons a fixed set.

// attemptOutcomes are the outcomes of an attempt (worker.RunEnd.Outcome).
var attemptOutcomes = []string{
	string(events.StatusCompleted), string(events.StatusError), string(events.StatusAborted), string(events.StatusInterrupted),
	worker.OutcomeHandedBack, worker.OutcomeLeaseLost, worker.OutcomeReleased, worker.OutcomeRetry,
	worker.OutcomeEndedElsewhere, worker.OutcomeUnrecorded,
}

// finalStatuses are the statuses a run finishes with (meter.Usage.Status).
var finalStatuses = []string{
	string(events.StatusCompleted), string(events.StatusError), string(events.StatusAborted), string(events.StatusInterrupted),
}

// deadLetterReasons are the reasons a dispatch is dead-lettered.
var deadLetterReasons = []worker.DeadLetterReason{
	worker.DeadLetterMalformed, worker.DeadLetterBadSubject, worker.DeadLetterBadID, worker.DeadLetterTooDeep,
	worker.DeadLetterCorruptRow, worker.DeadLetterWrongType, worker.DeadLetterKeyBusy, worker.DeadLetterSchema,
}

// sweepActions names the counts of reconcile.Stats that are actions.
func sweepActions(st reconcile.Stats) map[string]int {
	return map[string]int{
		"unindexed": st.Unindexed, "republished": st.Republished, "unserved": st.Unserved,
		"dead-lettered": st.DeadLettered, "given-up": st.GivenUp, "recovered": st.Recovered,
		"cancelled": st.Cancelled, "failed": st.Failed, "released": st.Released,
	}
}

// durationBuckets spans sub-second handlers to day-long runs.
var durationBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}

// Metrics is one process's metrics.
type Metrics struct {
	reg *prometheus.Registry

	started      *prometheus.CounterVec
	finished     *prometheus.CounterVec
	inFlight     *prometheus.GaugeVec
	queued       *prometheus.HistogramVec
	duration     *prometheus.HistogramVec
	takeovers    *prometheus.CounterVec
	leaseLosses  *prometheus.CounterVec
	cancels      *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	meterStarts  *prometheus.CounterVec
	meterEnds    *prometheus.CounterVec
	meterTook    *prometheus.HistogramVec
	delivered    *prometheus.CounterVec
	failures     *prometheus.CounterVec
	finishDLQ    *prometheus.CounterVec
	sweepTook    prometheus.Histogram
	sweepErrors  prometheus.Counter
	sweepActive  prometheus.Gauge
	sweepTouched *prometheus.CounterVec
	restored     *prometheus.CounterVec
	repaired     prometheus.Counter
	usage        usageCounters

	mu     sync.Mutex
	zeroed map[zeroKey]bool // the groups of series set to 0 so far
}

// zeroGroup is a group of series set to 0 together for one label value.
type zeroGroup int

const (
	groupWorker  zeroGroup = iota // per agent type: what a worker observes
	groupMeter                    // per agent type: what the meter counts
	groupHandler                  // per finish handler
)

type zeroKey struct {
	group zeroGroup
	label string
}

// New returns Metrics with a fresh registry holding jetrun's metrics and
// the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	m.started = counter("jetrun_worker_runs_started_total",
		"Attempts of runs this worker process started.", "agent_type")
	m.finished = counter("jetrun_worker_runs_finished_total",
		"Attempts of runs this worker process ended, by outcome: a final status (completed, error, aborted, interrupted) or handed-back, lease-lost, retry, released, ended-elsewhere, unrecorded.",
		"agent_type", "status")
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "jetrun_worker_runs_in_flight",
		Help: "Runs this worker process is executing now."}, []string{"agent_type"})
	m.reg.MustRegister(m.inFlight)
	m.queued = histogram("jetrun_worker_dispatch_to_start_seconds",
		"Time from a run's dispatch (its stream timestamp) to the start of its first attempt.",
		prometheus.ExponentialBuckets(0.001, 4, 12), "agent_type")
	m.duration = histogram("jetrun_worker_run_duration_seconds",
		"How long an attempt ran, by outcome (see jetrun_worker_runs_finished_total).", durationBuckets, "agent_type", "status")
	m.takeovers = counter("jetrun_worker_takeovers_total",
		"Attempts that took up a run an earlier attempt had started (lost or handed-back worker).", "agent_type")
	m.leaseLosses = counter("jetrun_worker_lease_losses_total",
		"Attempts stopped because they no longer held their run.", "agent_type")
	m.cancels = counter("jetrun_worker_cancels_total",
		"Attempts ended aborted by a cancel.", "agent_type")
	m.deadLetters = counter("jetrun_dead_letters_total",
		"Dispatches filed in the dead-letter stream, by reason (malformed, bad-subject, bad-id, too-deep, corrupt-row, wrong-type, key-busy, schema).",
		"agent_type", "reason")
	m.meterStarts = counter("jetrun_runs_started_total",
		"Run starts (one per attempt) seen by this process's meter, cluster-wide, shared with the other metering processes.", "agent_type")
	m.meterEnds = counter("jetrun_runs_finished_total",
		"Run finishes by final status seen by this process's meter, cluster-wide, shared with the other metering processes.",
		"agent_type", "status")
	m.meterTook = histogram("jetrun_run_duration_seconds",
		"Time from a run's first start to its finish, seen by the meter.", durationBuckets, "agent_type", "status")
	m.delivered = counter("jetrun_finish_deliveries_total",
		"Finishes delivered to their handler and marked delivered.", "handler")
	m.failures = counter("jetrun_finish_failures_total",
		"Failed finish handler attempts (each is retried).", "handler")
	m.finishDLQ = counter("jetrun_finish_dead_lettered_total",
		"Finishes given up and filed in the dead-letter stream.", "handler")
	m.sweepTook = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "jetrun_reconcile_sweep_duration_seconds",
		Help: "How long a reconcile sweep took.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)})
	m.sweepErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrun_reconcile_sweep_errors_total",
		Help: "Reconcile sweeps that stopped early."})
	m.sweepActive = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetrun_reconcile_active_runs",
		Help: "Runs in the active index at the last sweep of this process."})
	m.reg.MustRegister(m.sweepTook, m.sweepErrors, m.sweepActive)
	m.sweepTouched = counter("jetrun_reconcile_runs_touched_total",
		"Runs a reconcile sweep acted on, by action.", "action")
	m.restored = counter("jetrun_consumers_restored_total",
		"Durable consumers this process restored because someone deleted them (missing) or changed their settings (drifted).",
		"consumer", "reason")
	m.repaired = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrun_rows_repaired_total",
		Help: "Rows this process saw leave a final status (rewritten outside jetrun) and restored from the run's final status event."})
	m.reg.MustRegister(m.repaired)
	m.usage = newUsageCounters(counter)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for action := range sweepActions(reconcile.Stats{}) {
		m.sweepTouched.WithLabelValues(action)
	}
	m.zeroed = map[zeroKey]bool{}
	return m
}

// zero creates the series of group for label (at 0), once: an observer
// calls it before it counts, so a label's every series appears with its
// first event.
func (m *Metrics) zero(group zeroGroup, label string) {
	k := zeroKey{group, label}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.zeroed[k] {
		return
	}
	m.zeroed[k] = true
	switch group {
	case groupWorker:
		for _, c := range []*prometheus.CounterVec{m.started, m.takeovers, m.leaseLosses, m.cancels} {
			c.WithLabelValues(label)
		}
		m.inFlight.WithLabelValues(label)
		for _, o := range attemptOutcomes {
			m.finished.WithLabelValues(label, o)
		}
		for _, r := range deadLetterReasons {
			m.deadLetters.WithLabelValues(label, string(r))
		}
	case groupMeter:
		m.meterStarts.WithLabelValues(label)
		for _, s := range finalStatuses {
			m.meterEnds.WithLabelValues(label, s)
		}
	case groupHandler:
		for _, c := range []*prometheus.CounterVec{m.delivered, m.failures, m.finishDLQ} {
			c.WithLabelValues(label)
		}
	}
}

// WorkerAgentTypes serves the series a worker of these agent types feeds
// (runs started, in flight, finished by every outcome, takeovers, lease
// losses, cancels, dead letters by every reason) at 0 until they count.
func (m *Metrics) WorkerAgentTypes(agentTypes ...string) {
	for _, t := range agentTypes {
		m.zero(groupWorker, t)
	}
}

// MeterAgentTypes serves the meter's series of these agent types (runs
// started, finished by every final status) at 0 until they count.
func (m *Metrics) MeterAgentTypes(agentTypes ...string) {
	for _, t := range agentTypes {
		m.zero(groupMeter, t)
	}
}

// FinishHandlers serves the series of these finish handlers (deliveries,
// failures, dead letters) at 0 until they count.
func (m *Metrics) FinishHandlers(handlers ...string) {
	for _, h := range handlers {
		m.zero(groupHandler, h)
	}
}

// Registry returns the registry, to register more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text (or negotiated) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// RunStarted implements worker.Observer.
func (m *Metrics) RunStarted(s worker.RunStart) {
	m.zero(groupWorker, s.AgentType)
	m.started.WithLabelValues(s.AgentType).Inc()
	m.inFlight.WithLabelValues(s.AgentType).Inc()
	if s.Takeover {
		m.takeovers.WithLabelValues(s.AgentType).Inc()
	} else if s.Queued > 0 {
		m.queued.WithLabelValues(s.AgentType).Observe(s.Queued.Seconds())
	}
}

// RunEnded implements worker.Observer.
func (m *Metrics) RunEnded(e worker.RunEnd) {
	m.zero(groupWorker, e.AgentType)
	m.inFlight.WithLabelValues(e.AgentType).Dec()
	m.finished.WithLabelValues(e.AgentType, e.Outcome).Inc()
	m.duration.WithLabelValues(e.AgentType, e.Outcome).Observe(e.Took.Seconds())
	m.usage.count(e.AgentType, e.Usage)
	switch {
	case e.Outcome == worker.OutcomeLeaseLost:
		m.leaseLosses.WithLabelValues(e.AgentType).Inc()
	case e.Outcome == string(events.StatusAborted) && e.Reason == events.ReasonCancelled:
		m.cancels.WithLabelValues(e.AgentType).Inc()
	}
}

// DispatchDeadLettered implements worker.Observer.
func (m *Metrics) DispatchDeadLettered(agentType string, reason worker.DeadLetterReason) {
	m.zero(groupWorker, agentType)
	m.deadLetters.WithLabelValues(agentType, string(reason)).Inc()
}

// FinishDelivered implements finish.Observer.
func (m *Metrics) FinishDelivered(handler string) {
	m.zero(groupHandler, handler)
	m.delivered.WithLabelValues(handler).Inc()
}

// FinishFailed implements finish.Observer.
func (m *Metrics) FinishFailed(handler string) {
	m.zero(groupHandler, handler)
	m.failures.WithLabelValues(handler).Inc()
}

// FinishDeadLettered implements finish.Observer.
func (m *Metrics) FinishDeadLettered(handler string) {
	m.zero(groupHandler, handler)
	m.finishDLQ.WithLabelValues(handler).Inc()
}

// ConsumerRestored implements meter.Observer and pull.Restorer (the
// finish deliverer's and the worker's consumers).
func (m *Metrics) ConsumerRestored(consumer, reason string) {
	m.restored.WithLabelValues(consumer, reason).Inc()
}

// RowRepaired counts a final row restored after someone rewrote it.
func (m *Metrics) RowRepaired() { m.repaired.Inc() }

// Swept implements reconcile.Observer.
func (m *Metrics) Swept(st reconcile.Stats, err error) {
	if err != nil {
		m.sweepErrors.Inc()
		return
	}
	m.sweepTook.Observe(st.Took.Seconds())
	m.sweepActive.Set(float64(st.Active))
	for action, n := range sweepActions(st) {
		if n > 0 {
			m.sweepTouched.WithLabelValues(action).Add(float64(n))
		}
	}
}

// MeterStart is a meter.Hook counting a run's start.
func (m *Metrics) MeterStart(_ context.Context, u meter.Usage) error {
	m.zero(groupMeter, u.AgentType)
	m.meterStarts.WithLabelValues(u.AgentType).Inc()
	return nil
}

// MeterFinish is a meter.Hook counting a run's finish.
func (m *Metrics) MeterFinish(_ context.Context, u meter.Usage) error {
	m.zero(groupMeter, u.AgentType)
	m.meterEnds.WithLabelValues(u.AgentType, string(u.Status)).Inc()
	if u.Duration > 0 {
		m.meterTook.WithLabelValues(u.AgentType, string(u.Status)).Observe(u.Duration.Seconds())
	}
	return nil
}

var (
	_ worker.Observer    = (*Metrics)(nil)
	_ finish.Observer    = (*Metrics)(nil)
	_ reconcile.Observer = (*Metrics)(nil)
	_ meter.Hook         = (*Metrics)(nil).MeterStart
)

// DefaultLagTimeout bounds the JetStream reads of one scrape.
const DefaultLagTimeout = 2 * time.Second

// WatchLag registers a collector that reads, on every scrape, the dispatch
// consumers' pending counts: jetrun_dispatch_pending (queued, not yet
// delivered) and jetrun_dispatch_ack_pending (delivered, not yet
// acknowledged: in flight) per agent type. agentTypes limits it to those
// (nil: every agent type with a consumer). A scrape waits for JetStream at
// most timeout (0: DefaultLagTimeout); what it could not read is left out.
func (m *Metrics) WatchLag(js jetstream.JetStream, ns wire.Namespace, agentTypes []string, timeout time.Duration) {
	if timeout <= 0 {
		timeout = DefaultLagTimeout
	}
	m.reg.MustRegister(&lag{js: js, ns: ns, agentTypes: agentTypes, timeout: timeout})
}

// agentConsumerPrefix starts the name of every agent type's dispatch consumer.
var agentConsumerPrefix = strings.TrimSuffix(wire.AgentConsumer("x"), "x")

type lag struct {
	js         jetstream.JetStream
	ns         wire.Namespace
	agentTypes []string
	timeout    time.Duration
}

var (
	pendingDesc = prometheus.NewDesc("jetrun_dispatch_pending",
		"Dispatches queued for an agent type and not yet delivered to a worker (consumer num_pending).", []string{"agent_type"}, nil)
	ackPendingDesc = prometheus.NewDesc("jetrun_dispatch_ack_pending",
		"Dispatches of an agent type delivered and not yet acknowledged: runs in flight (consumer num_ack_pending).", []string{"agent_type"}, nil)
	lagErrorDesc = prometheus.NewDesc("jetrun_dispatch_pending_scrape_error",
		"1 if the last scrape could not read the dispatch consumers.", nil, nil)
)

func (l *lag) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- ackPendingDesc
	ch <- lagErrorDesc
}

func (l *lag) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	failed := 0.0
	emit := func(agentType string, ci *jetstream.ConsumerInfo) {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(ci.NumPending), agentType)
		ch <- prometheus.MustNewConstMetric(ackPendingDesc, prometheus.GaugeValue, float64(ci.NumAckPending), agentType)
	}
	if l.agentTypes != nil {
		for _, at := range l.agentTypes {
			c, err := l.js.Consumer(ctx, l.ns.DispatchStream(), wire.AgentConsumer(at))
			if err != nil {
				failed = 1
				continue
			}
			emit(at, c.CachedInfo())
		}
	} else if s, err := l.js.Stream(ctx, l.ns.DispatchStream()); err != nil {
		failed = 1
	} else {
		infos := s.ListConsumers(ctx)
		for ci := range infos.Info() {
			if at, ok := strings.CutPrefix(ci.Name, agentConsumerPrefix); ok {
				emit(at, ci)
			}
		}
		if infos.Err() != nil {
			failed = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(lagErrorDesc, prometheus.GaugeValue, failed)
}
