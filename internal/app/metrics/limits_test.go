package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/metrics"
	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// /metrics shows each limit's rates, the window's grants per tenant and
// its pauses, read from the bucket on scrape.
func TestLimitMetrics(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := limits.Open(ctx, js, wire.Namespace("jetrun"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Spec{Name: "gpt", Requests: 100, Tokens: 5000, WindowMs: time.Hour.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.WatchLimits(st, 0)
	if v, ok := value(t, m, "jetrun_limit_rate", "limit", "gpt", "kind", "tokens"); !ok || v != 5000 {
		t.Fatalf("jetrun_limit_rate tokens = %v, %v; want 5000", v, ok)
	}
	l, err := limits.New(limits.Config{Store: st, Worker: "w1", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(context.Background())
	for _, tenant := range []string{"acme", "acme", "globex"} {
		g, err := l.Reserve(ctx, "gpt", tenant, 10)
		if err != nil {
			t.Fatal(err)
		}
		g.Settle(10)
	}
	if err := l.Pause(ctx, "gpt", time.Minute, "429"); err != nil {
		t.Fatal(err)
	}
	// A reservation that waits on the pause makes the worker report.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = l.Reserve(wctx, "gpt", "acme", 10) }()
	natstest.Eventually(t, 30*time.Second, func() bool {
		v, _ := value(t, m, "jetrun_limit_tenant_requests", "limit", "gpt", "tenant", "acme", "window", "current")
		return v == 2
	}, "the window's grants to acme reach /metrics")
	if v, _ := value(t, m, "jetrun_limit_used", "limit", "gpt", "kind", "requests", "window", "current"); v != 3 {
		t.Errorf("jetrun_limit_used requests = %v; want 3", v)
	}
	if v, _ := value(t, m, "jetrun_limit_paused", "limit", "gpt"); v != 1 {
		t.Errorf("jetrun_limit_paused = %v; want 1", v)
	}
	if v, _ := value(t, m, "jetrun_limit_pauses_total", "limit", "gpt"); v != 1 {
		t.Errorf("jetrun_limit_pauses_total = %v; want 1", v)
	}
}
