package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// noModel labels usage reported without a model name.
const noModel = "none"

// usageCounters count the tokens and cost handlers report (worker.Run.Usage),
// per attempt as the worker process that ran it saw them. The model label
// comes from handlers' reports (bounded in length by
// events.MaxModelNameLength), never from dispatch payloads.
type usageCounters struct {
	tokens *prometheus.CounterVec
	cost   *prometheus.CounterVec
}

func newUsageCounters(counter func(name, help string, labels ...string) *prometheus.CounterVec) usageCounters {
	return usageCounters{
		tokens: counter("jetrun_worker_usage_tokens_total",
			"Tokens handlers in this worker process reported, by agent type, model and kind (input, output).",
			"agent_type", "model", "kind"),
		cost: counter("jetrun_worker_usage_cost_micros_total",
			"Cost in millionths of a currency unit handlers in this worker process reported, by agent type and model.",
			"agent_type", "model"),
	}
}

// count adds one attempt's usage.
func (c usageCounters) count(agentType string, u events.Usage) {
	rest := u.UsageTotals
	for name, t := range u.Models {
		c.add(agentType, name, t)
		rest = model.SubTotals(rest, t)
	}
	c.add(agentType, noModel, rest)
}

func (c usageCounters) add(agentType, model string, t events.UsageTotals) {
	if t.InputTokens > 0 {
		c.tokens.WithLabelValues(agentType, model, "input").Add(float64(t.InputTokens))
	}
	if t.OutputTokens > 0 {
		c.tokens.WithLabelValues(agentType, model, "output").Add(float64(t.OutputTokens))
	}
	if t.CostMicros > 0 {
		c.cost.WithLabelValues(agentType, model).Add(float64(t.CostMicros))
	}
}
