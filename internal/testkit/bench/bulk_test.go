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
// burn-down (dispatch and work-down, end to end); beside them the stored
// writes and the CPU (this process's, and the server's when it is a
// process of its own) of a run in each phase. Beside them, the documented
// plain-publish pipelining: the same 10,000 dispatches published
// asynchronously with a window of acks in flight (docs/protocol.md), which
// is what other languages do. It runs on an embedded server and against
// nats-server as a process of its own over TCP (server_process), as
// deployed.
func BenchmarkWorkloadBulkDispatch(b *testing.B) {
	b.Run("embedded", func(b *testing.B) {
		ns, nc, js := embeddedServer(b)
		bulkDispatch(b, "bulk_dispatch", nc, js, func() *nats.Conn { return inProcess(b, ns) }, serverProc{})
	})
	b.Run("server_process", func(b *testing.B) {
		sp := startServerProcess(b)
		nc := sp.nc
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		connect := func() *nats.Conn {
			wc, err := nats.Connect(nc.ConnectedUrl())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(wc.Close)
			return wc
		}
		bulkDispatch(b, "bulk_dispatch_server_process", nc, js, connect, sp)
	})
}

// bulkDispatch measures one bulk dispatch and its work-down on the server
// nc and js are connected to; workers connect with connect. sp is the
// server when it is a process of its own (its CPU is then reported apart),
// else zero. With profileEnv set, both work-downs are profiled (worker and
// server: profileBoth).
func bulkDispatch(b *testing.B, name string, nc *nats.Conn, js jetstream.JetStream, connect func() *nats.Conn, sp serverProc) {
	ctx := context.Background()
	server := func() time.Duration {
		if sp.cpu == nil {
			return 0
		}
		return sp.cpu()
	}
	rawW, rawS := cpuTime(), server()
	raw := rawAsyncPublishRate(b, js)
	rawW, rawS = cpuTime()-rawW, server()-rawS
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		b.Fatal(err)
	}
	lat, plainLat := newLatencies(runs), newLatencies(runs)
	lat.follow(b, nc)
	plainLat.follow(b, nc)

	var dispatch, workDown, plain, plainWorkDown time.Duration
	var dispatchCPU, workDownCPU time.Duration
	var workDownWorker, workDownServer, plainWorker, plainServer time.Duration
	var dispatchWrites, workDownWrites, plainWrites uint64
	for b.Loop() {
		reqs := make([]parent.Request, runs)
		for i := range reqs {
			reqs[i] = parent.Request{AgentType: "noop", RunID: fmt.Sprintf("bulk-%d", i), Input: 1}
			lat.start(reqs[i].RunID)
		}
		stored0 := storedTotal(b, js)
		begin, cpu0 := time.Now(), cpuTime()+server()
		for i, res := range client.DispatchMany(ctx, reqs) {
			if res.Err != nil || !res.Created {
				b.Fatalf("request %d: %+v", i, res)
			}
		}
		dispatch, dispatchCPU = time.Since(begin), cpuTime()+server()-cpu0
		stored1 := storedTotal(b, js)
		wc := connect()
		stopProfile := profileBoth(b, name+"-workdown", sp.profileURL, 1)
		begin, w0, s0 := time.Now(), cpuTime(), server()
		startWorker(b, wc, concurrency, "noop", noop)
		lat.wait(b, "bulk-dispatched runs completed")
		workDown, workDownWorker, workDownServer = time.Since(begin), cpuTime()-w0, server()-s0
		stopProfile()
		workDownCPU = workDownWorker + workDownServer
		dispatchWrites, workDownWrites = stored1-stored0, storedTotal(b, js)-stored1

		for i := range runs {
			plainLat.start(fmt.Sprintf("plain-%d", i))
		}
		plain = plainPublishDispatches(b, js, runs)
		stored2 := storedTotal(b, js)
		wc = connect()
		stopProfile = profileBoth(b, name+"-plain_workdown", sp.profileURL, 1)
		begin, w0, s0 = time.Now(), cpuTime(), server()
		startWorker(b, wc, concurrency, "plain", noop)
		plainLat.wait(b, "plain-published runs completed")
		plainWorkDown, plainWorker, plainServer = time.Since(begin), cpuTime()-w0, server()-s0
		stopProfile()
		plainWrites = storedTotal(b, js) - stored2
	}
	rate := func(d time.Duration) float64 { return runs / d.Seconds() }
	perRun := func(d time.Duration) float64 { return float64(d.Microseconds()) / runs }
	b.ReportMetric(raw, "raw-async-pub/s")
	b.ReportMetric(rate(dispatch)/raw, "dispatch-vs-raw")
	b.ReportMetric(rate(workDown)/raw, "workdown-vs-raw")
	b.ReportMetric(rate(dispatch+workDown)/raw, "burndown-vs-raw")
	b.ReportMetric(perRun(dispatchCPU), "dispatch-cpu-µs/run")
	b.ReportMetric(perRun(workDownCPU), "workdown-cpu-µs/run")
	b.ReportMetric(float64(dispatchWrites)/runs, "dispatch-writes/run")
	b.ReportMetric(rate(plain)/raw, "plain-pub-vs-raw")
	b.ReportMetric(rate(plain+plainWorkDown)/raw, "plain-burndown-vs-raw")
	report(name, "runs", runs, "worker_concurrency", concurrency, "raw_async_pub_per_s", raw,
		"dispatch_many_runs_per_s", rate(dispatch), "dispatch_many_vs_raw_async_pub", rate(dispatch)/raw,
		"workdown_runs_per_s", rate(workDown), "workdown_vs_raw_async_pub", rate(workDown)/raw,
		"burndown_runs_per_s", rate(dispatch+workDown), "burndown_vs_raw_async_pub", rate(dispatch+workDown)/raw,
		"dispatch_cpu_us_per_run", perRun(dispatchCPU), "workdown_cpu_us_per_run", perRun(workDownCPU),
		"dispatch_stored_writes_per_run", float64(dispatchWrites)/runs,
		"workdown_stored_writes_per_run", float64(workDownWrites)/runs,
		"plain_pub_dispatches_per_s", rate(plain), "plain_pub_vs_raw_async_pub", rate(plain)/raw,
		"plain_workdown_vs_raw_async_pub", rate(plainWorkDown)/raw,
		"plain_burndown_vs_raw_async_pub", rate(plain+plainWorkDown)/raw,
		"river_batched_burndown_vs_raw", 0.115)
	// The work-downs' CPU per run, the worker's process (this one: the
	// worker, and the subscriber that follows the runs) and the server's
	// apart, beside the load they were measured in.
	report(name+"_workdown_cpu", "workdown_worker_us_per_run", perRun(workDownWorker),
		"workdown_server_us_per_run", perRun(workDownServer),
		"plain_workdown_worker_us_per_run", perRun(plainWorker), "plain_workdown_server_us_per_run", perRun(plainServer),
		"plain_workdown_stored_writes_per_run", float64(plainWrites)/runs,
		"raw_worker_process_us_per_msg", float64(rawW.Microseconds())/rawMessages,
		"raw_server_us_per_msg", float64(rawS.Microseconds())/rawMessages, "load", loadAverage())
}

// storedTotal is how many messages every stream of js has stored so far.
func storedTotal(b *testing.B, js jetstream.JetStream) uint64 {
	var n uint64
	for _, last := range storedByStream(b, js) {
		n += last
	}
	return n
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
