package bench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Sizes of BenchmarkWorkloadSyncAlways: smaller than the other workloads,
// since a write fsynced each time is slow and the benchmark runs twice.
const (
	syncRawMessages = 20_000
	syncRuns        = 1_000
)

// BenchmarkWorkloadSyncAlways prints what `sync_interval: always` (the
// shipped cluster configs' setting) costs: raw async publish and no-op
// runs per second (dispatch to completed, a worker at concurrency 64 in
// the same process) on an embedded file-store server fsyncing every
// write, as ratios of the same on one with nats-server's default (fsync
// every 2 minutes).
func BenchmarkWorkloadSyncAlways(b *testing.B) {
	var raw, rate [2]float64 // [default, always]
	for b.Loop() {
		for i, always := range []bool{false, true} {
			raw[i], rate[i] = syncWorkload(b, always)
		}
	}
	b.ReportMetric(raw[1]/raw[0], "raw-always-vs-default")
	b.ReportMetric(rate[1]/rate[0], "runs-always-vs-default")
	report("sync_always", "raw_async_pub_per_s_default", raw[0], "raw_async_pub_per_s_always", raw[1],
		"raw_always_vs_default", raw[1]/raw[0],
		"runs", syncRuns, "runs_per_s_default", rate[0], "runs_per_s_always", rate[1],
		"runs_always_vs_default", rate[1]/rate[0])
}

// syncWorkload measures raw async publish and no-op runs per second on a
// fresh embedded server, fsyncing every write when always.
func syncWorkload(b *testing.B, always bool) (raw, runsPerSec float64) {
	b.Helper()
	ns := natstest.RunServerWithOptions(b, &server.Options{SyncAlways: always})
	nc := inProcess(b, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	begin := time.Now()
	publishWindowed(b, js, syncRawMessages, func(int) string { return "raw.bench" }, make([]byte, 128))
	raw = syncRawMessages / time.Since(begin).Seconds()

	// Stopped before the other setting's turn, with its server.
	w := startWorkerConfig(b, nc, worker.Config{Concurrency: concurrency}, "noop", noop)
	defer ns.Shutdown()
	defer func() {
		if err := w.Stop(); err != nil {
			b.Error(err)
		}
	}()
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	lat := newLatencies(syncRuns)
	lat.follow(b, nc)
	begin = time.Now()
	fanOut(b, syncRuns, dispatchers, func(i int) error {
		id := fmt.Sprintf("sync-%d", i)
		lat.start(id)
		_, err := client.Dispatch(ctx, parent.Request{AgentType: "noop", RunID: id, Input: 1})
		return err
	})
	lat.wait(b, "runs completed")
	return raw, syncRuns / time.Since(begin).Seconds()
}
