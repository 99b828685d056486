package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Workload sizes: fixed, so figures from different runs compare.
const (
	rawMessages   = 100_000
	rawWindow     = 500
	runs          = 10_000
	dispatchers   = 8
	concurrency   = 64
	cancelSamples = 50
)

// embeddedServer starts a file-store server like parent-worker's, and an
// in-process connection to it, as parent-worker's own components use.
func embeddedServer(b *testing.B) (*server.Server, *nats.Conn, jetstream.JetStream) {
	b.Helper()
	ns := natstest.RunServer(b)
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return ns, nc, js
}

// rawAsyncPublishRate is raw JetStream's async publish rate (128 B messages,
// a window of 500 in flight) on the same server.
func rawAsyncPublishRate(b *testing.B, js jetstream.JetStream) float64 {
	b.Helper()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	publishWindowed(b, js, rawMessages, func(int) string { return "raw.bench" }, make([]byte, 128))
	rate := rawMessages / time.Since(start).Seconds()
	if err := js.DeleteStream(ctx, "RAW"); err != nil {
		b.Fatal(err)
	}
	return rate
}

// storedMessages sums, over every stream, the messages ever stored: JetStream
// writes (stream publishes and KV writes alike).
func storedMessages(b *testing.B, js jetstream.JetStream) uint64 {
	b.Helper()
	var total uint64
	names := js.StreamNames(context.Background())
	for name := range names.Name() {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		total += s.CachedInfo().State.LastSeq
	}
	return total
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// publishWindowed publishes n messages asynchronously, rawWindow in flight.
func publishWindowed(b *testing.B, js jetstream.JetStream, n int, subject func(i int) string, payload []byte) {
	b.Helper()
	for i := range n {
		if _, err := js.PublishAsync(subject(i), payload); err != nil {
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
	<-js.PublishAsyncComplete()
}

// startWorker starts a worker running handler for agentType.
func startWorker(b *testing.B, nc *nats.Conn, concurrency int, agentType string, handler worker.HandlerFunc) {
	b.Helper()
	startWorkerConfig(b, nc, worker.Config{Concurrency: concurrency}, agentType, handler)
}

// startWorkerConfig starts a worker with cfg running handler for agentType;
// it is stopped at cleanup.
func startWorkerConfig(b *testing.B, nc *nats.Conn, cfg worker.Config, agentType string, handler worker.HandlerFunc) *worker.Worker {
	b.Helper()
	rt := jetruntest.OpenRuntime(b, nc, jetrun.Config{})
	return jetruntest.StartWorker(b, rt, cfg, func(w *worker.Worker) { w.Handle(agentType, handler) })
}

func noop(context.Context, *worker.Run) (worker.Result, error) { return worker.Result{}, nil }

// fanOut calls fn for 1..n from workers goroutines; the first error fails b.
func fanOut(b *testing.B, n, workers int, fn func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				if err := fn(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// latencies times n runs from their dispatch to an observed end.
type latencies struct {
	n       int
	mu      sync.Mutex
	started map[string]time.Time
	took    []time.Duration
	done    chan struct{}
}

func newLatencies(n int) *latencies {
	return &latencies{n: n, started: make(map[string]time.Time, n), took: make([]time.Duration, 0, n), done: make(chan struct{})}
}

func (l *latencies) start(id string) {
	l.mu.Lock()
	l.started[id] = time.Now()
	l.mu.Unlock()
}

func (l *latencies) end(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t0, ok := l.started[id]; ok {
		l.took = append(l.took, time.Since(t0))
		delete(l.started, id)
		if len(l.took) == l.n {
			close(l.done)
		}
	}
}

// follow ends the timing of each run whose "completed" status event a
// subscriber on nc sees, from now until b's cleanup. The subscriber shares
// the measured process, so it takes the run's id from the subject and
// looks for the status in the payload without decoding it (decoding every
// status event cost the burn-down about a twentieth of its process's CPU).
func (l *latencies) follow(b *testing.B, nc *nats.Conn) {
	b.Helper()
	const prefix, suffix = "jetrun.run.", ".status"
	completed := []byte(`"status":"` + events.StatusCompleted + `"`)
	sub, err := nc.Subscribe(prefix+"*"+suffix, func(m *nats.Msg) {
		if bytes.Contains(m.Data, completed) {
			l.end(strings.TrimSuffix(strings.TrimPrefix(m.Subject, prefix), suffix))
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
}

// wait waits for all n ends and returns the latencies sorted.
func (l *latencies) wait(b *testing.B, what string) []time.Duration {
	b.Helper()
	select {
	case <-l.done:
	case <-time.After(5 * time.Minute):
		l.mu.Lock()
		defer l.mu.Unlock()
		b.Fatalf("only %d of %d %s", len(l.took), l.n, what)
	}
	slices.Sort(l.took)
	return l.took
}

// BenchmarkWorkloadRunsVersusRaw reports, from one server in one run:
// raw async publish msgs/s, end-to-end runs/s with a no-op handler, their
// ratio, dispatch→completed latency p50/p99, and JetStream writes per run.
func BenchmarkWorkloadRunsVersusRaw(b *testing.B) {
	_, nc, js := embeddedServer(b)
	ctx := context.Background()
	raw := rawAsyncPublishRate(b, js)

	startWorker(b, nc, concurrency, "noop", noop)
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}

	// Completions as a subscriber sees them: the final status event.
	lat := newLatencies(runs)
	lat.follow(b, nc)

	writesBefore := storedMessages(b, js)
	var (
		elapsed   time.Duration
		latencies []time.Duration
	)
	for b.Loop() {
		begin := time.Now()
		fanOut(b, runs, dispatchers, func(i int) error {
			id := fmt.Sprintf("bench-%d", i)
			lat.start(id)
			_, err := client.Dispatch(ctx, parent.Request{AgentType: "noop", RunID: id, Input: 1})
			return err
		})
		latencies = lat.wait(b, "runs completed")
		elapsed = time.Since(begin)
	}
	writesPerRun := float64(storedMessages(b, js)-writesBefore) / runs
	rate := runs / elapsed.Seconds()

	b.ReportMetric(raw, "raw-async-pub/s")
	b.ReportMetric(rate, "runs/s")
	b.ReportMetric(rate/raw, "runs-per-raw-msg")
	b.ReportMetric(ms(percentile(latencies, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(latencies, 0.99)), "p99-ms")
	b.ReportMetric(writesPerRun, "js-writes/run")
	b.ReportMetric(rate*writesPerRun/raw, "write-efficiency")
	b.Logf("raw JetStream async publish: %.0f msgs/s", raw)
	b.Logf("jetrun no-op runs: %.0f runs/s (%d runs, %d dispatchers, worker concurrency %d) = %.4f of raw msgs/s (1 run per %.0f raw msgs)",
		rate, runs, dispatchers, concurrency, rate/raw, raw/rate)
	b.Logf("dispatch→completed: p50 %.2f ms, p99 %.2f ms", ms(percentile(latencies, 0.5)), ms(percentile(latencies, 0.99)))
	b.Logf("JetStream writes per run: %.2f; runs/s × writes/run ÷ raw msgs/s = %.2f of raw JetStream's write rate",
		writesPerRun, rate*writesPerRun/raw)
}

// BenchmarkWorkloadBurnDown queues 10,000 no-op runs with no worker
// running, then starts one (on a connection of its own, as a child-worker
// process has) and reports how fast it works the queue down, as a ratio of
// raw async publish on the same server: the worker's own rate, where
// BenchmarkWorkloadRunsVersusRaw also carries the dispatching client's
// cost in the same process. It runs at the workload benchmarks' worker
// concurrency and at 256 (agent workers run hundreds of runs at once), on
// an embedded server, and at 64 again against nats-server as a process of
// its own over TCP, as a fleet of child-workers is deployed (its CPU is
// then reported apart).
func BenchmarkWorkloadBurnDown(b *testing.B) {
	for _, conc := range []int{concurrency, 256} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			ns, nc, js := embeddedServer(b)
			burnDown(b, "burndown", nc, js, func() *nats.Conn { return inProcess(b, ns) }, nil, conc)
		})
	}
	b.Run(fmt.Sprintf("server_process/concurrency=%d", concurrency), func(b *testing.B) {
		nc, serverCPU := serverProcess(b)
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
		burnDown(b, "burndown_server_process", nc, js, connect, serverCPU, concurrency)
	})
}

// burnDown measures one burn-down on the server nc and js are connected
// to; the worker connects with connect. serverCPU, when the server is a
// process of its own, reads its CPU so far.
func burnDown(b *testing.B, name string, nc *nats.Conn, js jetstream.JetStream, connect func() *nats.Conn, serverCPU func() time.Duration, conc int) {
	ctx := context.Background()
	raw := rawAsyncPublishRate(b, js)
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		b.Fatal(err)
	}
	lat := newLatencies(runs)
	lat.follow(b, nc)

	var elapsed, cpu, server time.Duration
	for b.Loop() {
		fanOut(b, runs, dispatchers, func(i int) error {
			id := fmt.Sprintf("burn-%d", i)
			lat.start(id)
			_, err := client.Dispatch(ctx, parent.Request{AgentType: "noop", RunID: id, Input: 1})
			return err
		})
		var server0 time.Duration
		if serverCPU != nil {
			server0 = serverCPU()
		}
		begin, cpu0 := time.Now(), cpuTime()
		startWorker(b, connect(), conc, "noop", noop)
		lat.wait(b, "queued runs completed")
		elapsed, cpu = time.Since(begin), cpuTime()-cpu0
		if serverCPU != nil {
			server = serverCPU() - server0
		}
	}
	rate := runs / elapsed.Seconds()
	cpuPerRun := float64((cpu + server).Microseconds()) / runs // worker and server
	b.ReportMetric(raw, "raw-async-pub/s")
	b.ReportMetric(rate, "runs/s")
	b.ReportMetric(rate/raw, "runs-per-raw-msg")
	b.ReportMetric(cpuPerRun, "cpu-µs/run")
	figures := []any{"runs", runs, "worker_concurrency", conc, "raw_async_pub_per_s", raw,
		"runs_per_s", rate, "runs_vs_raw_async_pub", rate / raw, "goal_runs_vs_raw", 0.06,
		"cpu_us_per_run", cpuPerRun}
	if serverCPU != nil {
		figures = append(figures, "server_process_cpu_us_per_run", float64(server.Microseconds())/runs)
	}
	report(name, figures...)
}

// BenchmarkWorkloadCancel reports how long a cancel takes to reach the
// handler and end the run aborted, as a subscriber to the status events sees
// it.
func BenchmarkWorkloadCancel(b *testing.B) {
	_, nc, _ := embeddedServer(b)
	ctx := context.Background()
	startWorker(b, nc, cancelSamples, "wait", func(ctx context.Context, _ *worker.Run) (worker.Result, error) {
		<-ctx.Done()
		return worker.Result{}, context.Cause(ctx)
	})
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	aborted := make(chan events.StatusEvent, cancelSamples)
	sub, err := nc.Subscribe("jetrun.run.*.status", func(m *nats.Msg) {
		var ev events.StatusEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Status == events.StatusAborted {
			aborted <- ev
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()

	var lat []time.Duration
	for b.Loop() {
		lat = lat[:0]
		ids := make([]string, cancelSamples)
		for i := range ids {
			ids[i] = fmt.Sprintf("cancel-%d-%d", i, time.Now().UnixNano())
			if _, err := client.Dispatch(ctx, parent.Request{AgentType: "wait", RunID: ids[i], Input: 1}); err != nil {
				b.Fatal(err)
			}
		}
		// Cancel once the worker holds every run and watches its row.
		for _, id := range ids {
			natstest.Eventually(b, 30*time.Second, func() bool {
				row, err := client.Inspect(ctx, id)
				return err == nil && row.Status == events.StatusRunning && time.Since(row.StartedAt) > 0
			}, "run %s never ran", id)
		}
		for _, id := range ids {
			t0 := time.Now()
			if _, err := client.Cancel(ctx, id, "bench"); err != nil {
				b.Fatal(err)
			}
			select {
			case <-aborted:
				lat = append(lat, time.Since(t0))
			case <-time.After(30 * time.Second):
				b.Fatal("no aborted event")
			}
		}
	}
	slices.Sort(lat)
	b.ReportMetric(ms(percentile(lat, 0.5)), "cancel-p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "cancel-p99-ms")
	b.Logf("cancel → aborted event: p50 %.2f ms, p99 %.2f ms over %d runs", ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), len(lat))
}

// BenchmarkLeaseRenewal compares what one heartbeat costs under the two lease
// mechanisms docs/leases.md weighs: a compare-and-set of the row's lease
// (both need it, to fence), and the InProgress ack that keeps a held
// dispatch from being redelivered (only the held-message mechanism).
func BenchmarkLeaseRenewal(b *testing.B) {
	_, _, js := embeddedServer(b)
	ctx := context.Background()
	kvb, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "lease", History: 1})
	if err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 600) // about a run row's size
	rev, err := kvb.Put(ctx, "run", value)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"q"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		b.Fatal(err)
	}
	if _, err := js.Publish(ctx, "q", []byte("dispatch")); err != nil {
		b.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "Q", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	msg, err := cons.Next()
	if err != nil {
		b.Fatal(err)
	}

	b.Run("kv-cas", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rev, err = kvb.Update(ctx, "run", value, rev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-progress", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := msg.InProgress(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kv-cas+in-progress", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rev, err = kvb.Update(ctx, "run", value, rev); err != nil {
				b.Fatal(err)
			}
			if err := msg.InProgress(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWorkloadReconcileSweep reports the reconciler's sweep time over
// 1,000 active runs with 0 and then 100,000 retained finished runs: the sweep
// reads the active-run index, so the two should match.
func BenchmarkWorkloadReconcileSweep(b *testing.B) {
	const active, retained = 1_000, 100_000
	_, nc, js := embeddedServer(b)
	ctx := context.Background()
	r, err := reconcile.New(engine.From(jetruntest.OpenRuntime(b, nc, jetrun.Config{})), reconcile.Config{Parallelism: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Stop() })
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	create := func(n int, mk func(i int) *model.Row) {
		fanOut(b, n, 16, func(i int) error {
			_, err := store.Create(ctx, mk(i))
			return err
		})
	}
	// Active runs: running, with a live lease and a detached budget to check.
	create(active, func(i int) *model.Row {
		return &model.Row{ID: fmt.Sprintf("active-%d", i), AgentType: "noop", Status: events.StatusRunning, Attempt: 1,
			Worker: "w", LeaseUntil: now.Add(time.Hour), CreatedAt: now, StartedAt: now, LastSignalAt: now,
			Detached: &events.Detached{}}
	})
	measure := func() time.Duration {
		var best time.Duration
		deadline := time.Now().Add(time.Minute)
		for n := 0; n < 5; {
			st, err := r.Sweep(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if st.Active != active { // the index watch is still catching up
				if time.Now().After(deadline) {
					b.Fatalf("sweep saw %d active runs, want %d", st.Active, active)
				}
				continue
			}
			n++
			if best == 0 || st.Took < best {
				best = st.Took
			}
		}
		return best
	}
	var empty, full time.Duration
	for b.Loop() {
		empty = measure()
		// Retained runs: final and settled, not in the index (as the worker
		// leaves them).
		create(retained, func(i int) *model.Row {
			run := &model.Row{ID: fmt.Sprintf("done-%d", i), AgentType: "noop", Status: events.StatusCompleted, Attempt: 1,
				CreatedAt: now, StartedAt: now, FinishedAt: now}
			return run
		})
		all, err := store.Index().Active(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, ir := range all {
			if strings.HasPrefix(ir.ID, "done-") {
				if err := store.Index().UnindexID(ctx, ir.ID); err != nil {
					b.Fatal(err)
				}
			}
		}
		full = measure()
	}
	b.ReportMetric(ms(empty), "sweep-0-retained-ms")
	b.ReportMetric(ms(full), "sweep-100k-retained-ms")
	b.ReportMetric(float64(full)/float64(empty), "retained-cost-ratio")
	b.Logf("reconcile sweep over %d active runs: %.1f ms with 0 retained, %.1f ms with %d retained (ratio %.2f; best of 5)",
		active, ms(empty), ms(full), retained, float64(full)/float64(empty))
}

// BenchmarkWorkloadDetachedFinish reports dispatch→onFinish latency of
// detached no-op runs delivered to an in-process Go finish handler.
func BenchmarkWorkloadDetachedFinish(b *testing.B) {
	const n = 1_000
	_, nc, _ := embeddedServer(b)
	ctx := context.Background()
	startWorker(b, nc, concurrency, "noop", noop)
	lat := newLatencies(n)
	d, err := finish.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), finish.Config{Concurrency: 32})
	if err != nil {
		b.Fatal(err)
	}
	d.HandleFunc("bench", func(_ context.Context, _ *jetruntype.Run, res finish.Result) error {
		lat.end(res.RunID)
		return nil
	})
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Stop() })
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var latencies []time.Duration
	for b.Loop() {
		fanOut(b, n, dispatchers, func(i int) error {
			id := fmt.Sprintf("fin-%d", i)
			lat.start(id)
			_, err := client.Dispatch(ctx, parent.Request{AgentType: "noop", RunID: id, Input: 1,
				Detached: &events.Detached{OnFinish: "bench"}})
			return err
		})
		latencies = lat.wait(b, "finishes delivered")
	}
	b.ReportMetric(ms(percentile(latencies, 0.5)), "finish-p50-ms")
	b.ReportMetric(ms(percentile(latencies, 0.99)), "finish-p99-ms")
	b.Logf("dispatch→onFinish over %d detached runs: p50 %.2f ms, p99 %.2f ms", n, ms(percentile(latencies, 0.5)), ms(percentile(latencies, 0.99)))
}

// BenchmarkWorkloadReplay reports how fast a run of 10,000 events replays
// through wire.Replay against a raw ordered consumer over the same
// subjects, in a stream shared with other runs' events.
func BenchmarkWorkloadReplay(b *testing.B) {
	const events_, others = 10_000, 90_000
	_, _, js := embeddedServer(b)
	ctx := context.Background()
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{}); err != nil {
		b.Fatal(err)
	}
	// 10,000 chunks of run "big" interleaved with 90,000 of other runs.
	payload := []byte(`{"runId":"big","seq":1,"data":"a line of streamed output, about this long"}`)
	publishWindowed(b, js, events_+others, func(i int) string {
		if i%10 == 0 {
			return "jetrun.run.big.chunk"
		}
		return fmt.Sprintf("jetrun.run.other%d.chunk", i%100)
	}, payload)

	var raw, jr time.Duration
	for b.Loop() {
		var n int
		raw, jr, n = replayVersusRaw(b, js, "big")
		if n != events_ {
			b.Fatalf("replayed %d events, want %d", n, events_)
		}
	}
	b.ReportMetric(events_/raw.Seconds(), "raw-ordered-msgs/s")
	b.ReportMetric(events_/jr.Seconds(), "replay-events/s")
	b.ReportMetric(raw.Seconds()/jr.Seconds(), "replay-vs-raw")
	b.Logf("replay of a 10,000-event run in a 100,000-message stream: %s (%.0f events/s); raw ordered consumer %s (%.0f msgs/s); ratio %.2f",
		jr.Round(time.Millisecond), events_/jr.Seconds(), raw.Round(time.Millisecond), events_/raw.Seconds(), raw.Seconds()/jr.Seconds())
}

// replayVersusRaw times a raw ordered consumer over run id's subjects, read
// up to the run's last stored event, then wire.Replay of the same run
// (history only), and returns both durations and the number of events (the
// two must agree).
func replayVersusRaw(b *testing.B, js jetstream.JetStream, id string) (raw, replay time.Duration, n int) {
	b.Helper()
	ctx := context.Background()
	ns := events.Namespace("")
	stream, err := js.Stream(ctx, wire.Namespace(ns).EventsStream())
	if err != nil {
		b.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, ns.RunWildcard(id))
	if err != nil {
		b.Fatal(err)
	}

	start := time.Now()
	c, err := js.OrderedConsumer(ctx, wire.Namespace(ns).EventsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{ns.RunWildcard(id)}})
	if err != nil {
		b.Fatal(err)
	}
	it, err := c.Messages()
	if err != nil {
		b.Fatal(err)
	}
	rawN := 0
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			b.Fatal(err)
		}
		rawN++
		if meta, err := msg.Metadata(); err != nil || meta.Sequence.Stream >= last.Sequence {
			break
		}
	}
	it.Stop()
	raw = time.Since(start)

	start = time.Now()
	for ev, err := range wire.Replay(ctx, js, wire.Namespace(ns), id, events.ReplayOptions{Follow: events.HistoryOnly}) {
		if err != nil {
			b.Fatal(err)
		}
		if ev.LastPart() { // a coalesced chunk event counts once, as stored
			n++
		}
	}
	replay = time.Since(start)
	if n != rawN {
		b.Fatalf("replay of %s gave %d events, the raw ordered consumer %d", id, n, rawN)
	}
	return raw, replay, n
}

// BenchmarkWorkloadParkedSlot reports how soon a parked run gets its slot
// back at concurrency 1 (issue 23 item 3): from a signal to the handler
// resumed (Run.Wait returned), and the time of a run that delegates to
// itself three levels deep (RunChild of its own agent type, each child
// taking the slot its parent lent out).
func BenchmarkWorkloadParkedSlot(b *testing.B) {
	const samples = 5
	_, nc, _ := embeddedServer(b)
	ctx := context.Background()
	resumed := make(chan time.Time, 1)
	startWorker(b, nc, 1, "wait", func(ctx context.Context, r *worker.Run) (worker.Result, error) {
		if _, err := r.Wait(ctx, "go"); err != nil {
			return worker.Result{}, err
		}
		resumed <- time.Now()
		return worker.Result{}, nil
	})
	startWorker(b, nc, 1, "self", func(ctx context.Context, r *worker.Run) (worker.Result, error) {
		var level int
		if err := json.Unmarshal(r.Input(), &level); err != nil {
			return worker.Result{}, err
		}
		if level < 3 {
			if _, err := r.RunChild(ctx, worker.ChildRequest{AgentType: "self", Input: level + 1}); err != nil {
				return worker.Result{}, err
			}
		}
		return worker.Result{}, nil
	})
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var signalled, delegated []time.Duration
	for b.Loop() {
		signalled, delegated = signalled[:0], delegated[:0]
		for i := range samples {
			id := fmt.Sprintf("park-%d-%d", i, time.Now().UnixNano())
			if _, err := client.Dispatch(ctx, parent.Request{AgentType: "wait", RunID: id, Input: 1}); err != nil {
				b.Fatal(err)
			}
			natstest.Eventually(b, 30*time.Second, func() bool {
				row, err := client.Inspect(ctx, id)
				return err == nil && row.WaitingFor == "go"
			}, "run %s never waited", id)
			t0 := time.Now()
			if _, err := client.Signal(ctx, id, "go", 1); err != nil {
				b.Fatal(err)
			}
			select {
			case t := <-resumed:
				signalled = append(signalled, t.Sub(t0))
			case <-time.After(30 * time.Second):
				b.Fatal("the signalled run never resumed")
			}
		}
		for i := range samples {
			t0 := time.Now()
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, err := client.Run(rctx, parent.Request{AgentType: "self", RunID: fmt.Sprintf("self-%d-%d", i, time.Now().UnixNano()), Input: 1})
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			delegated = append(delegated, time.Since(t0))
		}
	}
	slices.Sort(signalled)
	slices.Sort(delegated)
	b.ReportMetric(ms(percentile(signalled, 0.5)), "signal-resume-p50-ms")
	b.ReportMetric(ms(signalled[len(signalled)-1]), "signal-resume-max-ms")
	b.ReportMetric(ms(percentile(delegated, 0.5)), "self-delegation-3-p50-ms")
	b.Logf("concurrency 1: signal → handler resumed p50 %.1f ms, max %.1f ms; 3 levels of self-delegation p50 %.1f ms, max %.1f ms (%d samples each)",
		ms(percentile(signalled, 0.5)), ms(signalled[len(signalled)-1]), ms(percentile(delegated, 0.5)), ms(delegated[len(delegated)-1]), samples)
}
