package parent_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// The server goes away while Awaits are pending and comes back on the same
// port and store: every Await still returns its run's final result, and an
// Await begun while the server is away does too.
func TestAwaitsSeeTheirRunsEndAcrossAServerRestart(t *testing.T) {
	t.Parallel()
	outage := natstest.RunOutage(t)
	nc := outage.Conn
	g := &gated{runs: map[string]int{}, gates: map[string]chan struct{}{}}
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{Concurrency: 64}, func(w *worker.Worker) { w.Handle("gated", g) })
	c, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A second client, whose only Await begins while the server is away.
	late, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	const n = 20
	ids := make([]string, n+1)
	results := make([]string, n+1)
	var awaits sync.WaitGroup
	await := func(c *parent.Client, i int) {
		awaits.Go(func() {
			res, err := c.Await(ctx, ids[i])
			if err != nil {
				results[i] = "error: " + err.Error()
				return
			}
			results[i] = res.Summary
		})
	}
	for i := range n {
		ids[i] = fmt.Sprintf("aw-%d", i)
		if _, err := c.Dispatch(ctx, parent.Request{AgentType: "gated", RunID: ids[i], Input: map[string]int{}}); err != nil {
			t.Fatal(err)
		}
		await(c, i)
	}
	ids[n] = "aw-late"
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "gated", RunID: ids[n], Input: map[string]int{}}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		for _, id := range ids {
			if r, _, err := engine.From(rt).Store().Get(ctx, id); err != nil || r.Status != events.StatusRunning {
				return false
			}
		}
		return true
	}, "runs not running")

	outage.Stop()
	await(late, n) // begun while the server is away
	natstest.Eventually(t, 30*time.Second, func() bool { return outage.FailedReconnects() >= 10 },
		"the connection did not try to reconnect")
	outage.Start()
	for _, id := range ids {
		close(g.gate(id))
	}
	done := make(chan struct{})
	go func() { awaits.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Fatalf("Awaits still pending after the restart: %v", results)
	}
	for i, id := range ids {
		if results[i] != "opened "+id {
			t.Errorf("await %s: %q", id, results[i])
		}
	}
}
