package meter_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/meter"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A finish carries the usage the run reported, to the hooks and on
// jetrun.obs.run.finished.
func TestFinishCarriesUsage(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	obsSub, err := nc.SubscribeSync("jetrun.obs.run.finished")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan meter.Usage, 1)
	m, err := meter.New(rt, meter.Config{
		OnFinish: func(_ context.Context, u meter.Usage) error { got <- u; return nil },
		Logger:   slog.New(obs.NewHandler(slog.DiscardHandler, nc, "", "test")),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("paid", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, run.Usage(ctx, worker.Usage{InputTokens: 12, OutputTokens: 30, CostMicros: 99, Model: "m"})
		})
	})
	c, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, parent.Request{AgentType: "paid", RunID: "paid-1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-got:
		if u.Usage == nil || u.Usage.InputTokens != 12 || u.Usage.OutputTokens != 30 || u.Usage.CostMicros != 99 ||
			u.Usage.Models["m"].CostMicros != 99 {
			t.Fatalf("finish usage %+v", u.Usage)
		}
	case <-ctx.Done():
		t.Fatal("no finish metered")
	}
	msg, err := obsSub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ev obs.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Attrs["input_tokens"] != float64(12) || ev.Attrs["output_tokens"] != float64(30) || ev.Attrs["cost_micros"] != float64(99) {
		t.Fatalf("run.finished attrs %v", ev.Attrs)
	}
}
