package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

// BenchmarkWorkloadBulkDispatch queues 10,000 no-op runs with one
// DispatchMany and no worker running, then starts one (concurrency 64, on
// a connection of its own) that works them down. It reports, as ratios of
// raw async publish on the same server: the dispatch phase alone, the
// work-down alone (BenchmarkWorkloadBurnDown's figure), and the whole
// burn-down (dispatch and work-down, end to end). Beside them, the
// documented plain-publish pipelining: the same 10,000 dispatches published
// asynchronously with a window of acks in flight (docs/protocol.md), which
// is what other languages do.
func BenchmarkWorkloadBulkDispatch(b *testing.B) {
	ns, nc, js := embeddedServer(b)
	ctx := context.Background()
	raw := rawAsyncPublishRate(b, js)
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		b.Fatal(err)
	}
	lat, plainLat := newLatencies(runs), newLatencies(runs)
	lat.follow(b, nc)
	plainLat.follow(b, nc)

	var dispatch, workDown, plain, plainWorkDown time.Duration
	for b.Loop() {
		reqs := make([]parent.Request, runs)
		for i := range reqs {
			reqs[i] = parent.Request{AgentType: "noop", RunID: fmt.Sprintf("bulk-%d", i), Input: 1}
			lat.start(reqs[i].RunID)
		}
		begin := time.Now()
		for i, res := range client.DispatchMany(ctx, reqs) {
			if res.Err != nil || !res.Created {
				b.Fatalf("request %d: %+v", i, res)
			}
		}
		dispatch = time.Since(begin)
		begin = time.Now()
		startWorker(b, inProcess(b, ns), concurrency, "noop", noop)
		lat.wait(b, "bulk-dispatched runs completed")
		workDown = time.Since(begin)

		for i := range runs {
			plainLat.start(fmt.Sprintf("plain-%d", i))
		}
		plain = plainPublishDispatches(b, js, runs)
		begin = time.Now()
		startWorker(b, inProcess(b, ns), concurrency, "plain", noop)
		plainLat.wait(b, "plain-published runs completed")
		plainWorkDown = time.Since(begin)
	}
	rate := func(d time.Duration) float64 { return runs / d.Seconds() }
	b.ReportMetric(raw, "raw-async-pub/s")
	b.ReportMetric(rate(dispatch)/raw, "dispatch-vs-raw")
	b.ReportMetric(rate(workDown)/raw, "workdown-vs-raw")
	b.ReportMetric(rate(dispatch+workDown)/raw, "burndown-vs-raw")
	b.ReportMetric(rate(plain)/raw, "plain-pub-vs-raw")
	b.ReportMetric(rate(plain+plainWorkDown)/raw, "plain-burndown-vs-raw")
	report("bulk_dispatch", "runs", runs, "worker_concurrency", concurrency, "raw_async_pub_per_s", raw,
		"dispatch_many_runs_per_s", rate(dispatch), "dispatch_many_vs_raw_async_pub", rate(dispatch)/raw,
		"workdown_runs_per_s", rate(workDown), "workdown_vs_raw_async_pub", rate(workDown)/raw,
		"burndown_runs_per_s", rate(dispatch+workDown), "burndown_vs_raw_async_pub", rate(dispatch+workDown)/raw,
		"plain_pub_dispatches_per_s", rate(plain), "plain_pub_vs_raw_async_pub", rate(plain)/raw,
		"plain_workdown_vs_raw_async_pub", rate(plainWorkDown)/raw,
		"plain_burndown_vs_raw_async_pub", rate(plain+plainWorkDown)/raw,
		"river_batched_burndown_vs_raw", 0.095)
}

// plainPublishDispatches publishes n dispatches of agent type "plain" the
// way docs/protocol.md tells other languages to: asynchronously, a window
// of rawWindow unacknowledged, each with Nats-Msg-Id = its run id, then
// waits for every ack. It returns how long that took.
func plainPublishDispatches(b *testing.B, js jetstream.JetStream, n int) time.Duration {
	b.Helper()
	var ns events.Namespace // the default prefix
	begin := time.Now()
	for i := range n {
		id := fmt.Sprintf("plain-%d", i)
		data, err := json.Marshal(events.Dispatch{RunID: id, Input: json.RawMessage(`1`)})
		if err != nil {
			b.Fatal(err)
		}
		msg := &nats.Msg{Subject: ns.DispatchSubject("plain"), Data: data}
		if _, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(id)); err != nil {
			b.Fatal(err)
		}
		if i%rawWindow == rawWindow-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				b.Fatal("async publish stalled")
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		b.Fatal("async publish stalled")
	}
	return time.Since(begin)
}
