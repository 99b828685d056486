package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// The figures of issue 7: runs held in flight, one chatty run, short runs'
// cost per run, and latency at a steady rate. Every line is printed as
// "<what> key=value …" so before/after outputs can be put side by side.

const runsStream = "KV_jetrun_runs"

// report prints one labelled line of key=value figures.
func report(what string, kv ...any) {
	var sb strings.Builder
	sb.WriteString(what)
	for i := 0; i+1 < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case float64:
			fmt.Fprintf(&sb, " %s=%.4g", kv[i], v)
		default:
			fmt.Fprintf(&sb, " %s=%v", kv[i], v)
		}
	}
	fmt.Println(sb.String())
}

// defaultLimitsServer starts an embedded server with nats-server's default
// JetStream limits (only memory and store sizes set, as natstest does) and
// reports the per-stream consumer limit it ended up with.
func defaultLimitsServer(b *testing.B) *server.Server {
	b.Helper()
	opts := &server.Options{}
	ns := natstest.RunServerWithOptions(b, opts)
	if opts.JetStreamLimits.DefaultMaxConsumers != server.JSDefaultMaxConsumersPerStream {
		b.Fatalf("server consumer limit per stream is %d, not the default %d",
			opts.JetStreamLimits.DefaultMaxConsumers, server.JSDefaultMaxConsumersPerStream)
	}
	return ns
}

// inProcess opens an extra in-process connection to ns, closed at cleanup.
func inProcess(b *testing.B, ns *server.Server, opts ...nats.Option) *nats.Conn {
	b.Helper()
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(ns)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// streamConsumers returns the consumer count of stream name.
func streamConsumers(b *testing.B, js jetstream.JetStream, name string) int {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	return s.CachedInfo().State.Consumers
}

// storedByStream is every stream's LastSeq: messages ever stored in it.
func storedByStream(b *testing.B, js jetstream.JetStream) map[string]uint64 {
	b.Helper()
	out := map[string]uint64{}
	names := js.StreamNames(context.Background())
	for name := range names.Name() {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		out[name] = s.CachedInfo().State.LastSeq
	}
	return out
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapAfterGC is HeapAlloc after a full collection.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// goroutines counts the process's goroutines, split into those running
// nats-server code (the embedded server's) and the rest (the worker's,
// the client's and the benchmark's). It reads the goroutine profile, which
// stops the world only briefly: a full stack dump (runtime.Stack) of
// 100,000 parked handlers stops it for seconds, long enough for the
// worker's liveness renewal to miss its deadline and the worker to lapse.
func goroutines() (server, other int) {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return 0, runtime.NumGoroutine()
	}
	// A record is a "<count> @ <pcs>" line, then a "#\t<pc>\t<func>…"
	// line a frame.
	count, inServer := 0, false
	flush := func() {
		if inServer {
			server += count
		} else {
			other += count
		}
		count, inServer = 0, false
	}
	for line := range strings.Lines(buf.String()) {
		if head, _, ok := strings.Cut(line, " @ "); ok {
			flush()
			count, _ = strconv.Atoi(head)
		} else if strings.Contains(line, "nats-server/v2/server.") {
			inServer = true
		}
	}
	flush()
	return server, other
}

// logCounter counts the worker's log records at Warn and above by message
// and error text, so a benchmark can say what went wrong, not just that it
// did.
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// runIDs matches the benchmark's run ids, folded out of log messages.
var runIDs = regexp.MustCompile(`inflight-[0-9]+`)

func newLogCounter() *logCounter { return &logCounter{counts: map[string]int{}} }

func (l *logCounter) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	key := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" || a.Key == "error" || a.Key == "cause" {
			key += ": " + wire.Truncate(a.Value.String(), 120)
		}
		return true
	})
	key = runIDs.ReplaceAllString(key, "<run>")
	l.mu.Lock()
	l.counts[key]++
	l.mu.Unlock()
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

// print reports every counted message, most frequent first.
func (l *logCounter) print(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(l.counts), func(a, b string) int { return l.counts[b] - l.counts[a] })
	if len(keys) == 0 {
		fmt.Printf("%s worker_warnings=0\n", what)
	}
	for _, k := range keys {
		fmt.Printf("%s worker_warning count=%d msg=%q\n", what, l.counts[k], k)
	}
}

// BenchmarkScaleInFlight holds 1,000 and then 10,000 runs parked in handlers
// that wait on their context, on a server with default limits, and reports
// what holding them costs: server consumers on the runs bucket, stored
// writes per second, heap and goroutines per run, and cancel latency.
func BenchmarkScaleInFlight(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			for b.Loop() {
				ns := defaultLimitsServer(b)
				inFlight(b, fmt.Sprintf("inflight runs=%d", n), n, false,
					func() *nats.Conn { return inProcess(b, ns) }, nil)
			}
		})
	}
}

// inFlight holds n runs in handlers that wait on their context (inside
// Run.Park when park is set) on the server connect reaches, and reports
// what holding them costs. serverCPU, when the server is a process of its
// own, gives its CPU so far: the figures then split the worker's (this
// process) from the server's.
func inFlight(b *testing.B, label string, n int, park bool, connect func() *nats.Conn, serverCPU func() time.Duration) {
	const (
		lease      = 6 * time.Second
		quiet      = 15 * time.Second
		samples    = 200
		startBound = 3 * time.Minute
	)
	nc := connect()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	client, err := parent.New(jetruntest.OpenRuntime(b, connect(), jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}

	var started, running atomic.Int64
	sampled := make(map[string]chan time.Time, samples)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("inflight-%d", i+1)
		if i%(n/samples) == 0 && len(sampled) < samples {
			sampled[ids[i]] = make(chan time.Time, 1)
		}
	}
	logs := newLogCounter()
	startWorkerConfig(b, connect(), worker.Config{
		Concurrency: n, FleetConcurrency: n, Lease: lease, Logger: slog.New(logs),
	}, "park", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		started.Add(1)
		running.Add(1)
		defer running.Add(-1)
		if park {
			_ = run.Park(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil })
		} else {
			<-ctx.Done()
		}
		if ch, ok := sampled[run.ID()]; ok {
			select {
			case ch <- time.Now():
			default:
			}
		}
		return worker.Result{}, context.Cause(ctx)
	})

	heap0 := heapAfterGC()
	srvG0, otherG0 := goroutines()
	consumers0 := streamConsumers(b, js, runsStream)

	if serverCPU == nil {
		serverCPU = func() time.Duration { return 0 }
	}
	ph := newPhases(b, label, n, serverCPU)
	defer ph.end()
	ph.begin("dispatch")
	begin := time.Now()
	fanOut(b, n, dispatchers, func(i int) error {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := client.Dispatch(dctx, parent.Request{AgentType: "park", RunID: ids[i-1], Input: 1})
		return err
	})
	dispatched := time.Since(begin)
	ph.begin("start")
	deadline := time.Now().Add(startBound)
	for started.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	allStarted := time.Since(begin)
	ph.begin("settle")
	// Past the cancel-watch delay of the youngest run, and a little more;
	// and past two leases, so the waiting runs are settled (shelved) when
	// the quiet window begins.
	time.Sleep(2*time.Second + 2*lease)
	report(label, "dispatched_s", dispatched.Seconds(), "handlers_started", started.Load(),
		"all_started_s", allStarted.Seconds(), "complete", started.Load() == int64(n))

	// The quiet window: nothing but holding the runs.
	ph.begin("quiet")
	writes0, cpu0, srvCPU0, t0 := storedMessages(b, js), cpuTime(), serverCPU(), time.Now()
	time.Sleep(quiet)
	writes1, cpu1, srvCPU1, window := storedMessages(b, js), cpuTime(), serverCPU(), time.Since(t0)
	ph.end()
	held := running.Load()
	consumers := streamConsumers(b, js, runsStream)
	heap1 := heapAfterGC()
	ph.heap()
	srvG1, otherG1 := goroutines()
	per := func(x float64) float64 { return x / float64(max(held, 1)) }
	report(label, "held", held,
		"consumers_on_runs_bucket", consumers, "consumers_on_runs_bucket_before", consumers0,
		"writes_per_s_per_1000", float64(writes1-writes0)/window.Seconds()/float64(max(held, 1))*1000,
		"heap_kb_per_run", per(float64(int64(heap1)-int64(heap0))/1024),
		"goroutines_per_run", per(float64(srvG1+otherG1-srvG0-otherG0)),
		"goroutines_per_run_outside_server", per(float64(otherG1-otherG0)),
		"goroutines_per_run_in_server", per(float64(srvG1-srvG0)),
		"cpu_pct_of_one_core", 100*float64(cpu1-cpu0)/float64(window),
		"server_process_cpu_pct_of_one_core", 100*float64(srvCPU1-srvCPU0)/float64(window),
		"load", loadAverage())
	b.Logf("heap is the whole process's (worker, client and the embedded server); goroutines are split by whether nats-server code is on their stack")

	// Cancel a sample: ~200 runs, one every 10ms, each timed from its Cancel
	// call to its handler seeing ctx.Done().
	ph.begin("cancel")
	var (
		mu      sync.Mutex
		lat     []time.Duration
		calls   []time.Duration // Cancel's own answer, of the same samples
		missed  int
		errs    int
		wg      sync.WaitGroup
		pacer   = time.NewTicker(10 * time.Millisecond)
		sampleT = slices.Sorted(maps.Keys(sampled))
	)
	for _, id := range sampleT {
		<-pacer.C
		wg.Go(func() {
			t0 := time.Now()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := client.Cancel(cctx, id, "bench"); err != nil {
				mu.Lock()
				errs++
				mu.Unlock()
				return
			}
			answered := time.Since(t0)
			select {
			case at := <-sampled[id]:
				mu.Lock()
				lat = append(lat, at.Sub(t0))
				calls = append(calls, answered)
				mu.Unlock()
			case <-time.After(30 * time.Second):
				mu.Lock()
				missed++
				mu.Unlock()
			}
		})
	}
	pacer.Stop()
	wg.Wait()
	ph.end()
	slices.Sort(lat)
	slices.Sort(calls)
	report(label, "cancel_samples", len(sampleT), "cancel_observed", len(lat),
		"cancel_not_observed_in_30s", missed, "cancel_errors", errs,
		"cancel_p50_ms", ms(percentile(lat, 0.5)), "cancel_p99_ms", ms(percentile(lat, 0.99)),
		"cancel_max_ms", ms(percentile(lat, 1)),
		"cancel_call_p50_ms", ms(percentile(calls, 0.5)), "cancel_call_p99_ms", ms(percentile(calls, 0.99)),
		"load", loadAverage())
	logs.print(label)

	// Clean up: cancel every run and wait, bounded, for the handlers to end.
	ph.begin("cleanup")
	cleanup := time.Now()
	var cancelErrs atomic.Int64
	fanOut(b, n, 16, func(i int) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := client.Cancel(cctx, ids[i-1], "bench cleanup"); err != nil {
			cancelErrs.Add(1)
		}
		return nil
	})
	deadline = time.Now().Add(2 * time.Minute)
	for running.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	report(label, "cleanup_s", time.Since(cleanup).Seconds(), "cleanup_cancel_errors", cancelErrs.Load(),
		"handlers_still_running", running.Load())
}

// BenchmarkWorkloadStream reports one run emitting 20,000 chunks of 100 B
// through run.Chunk, as a ratio of raw async publish on the same server, and
// the replay of that run against a raw ordered consumer: with chunk
// coalescing off (one event per chunk, as before issue 27) and with the
// default chunk window, in the same run.
func BenchmarkWorkloadStream(b *testing.B) {
	_, nc, js := embeddedServer(b)
	raw := rawAsyncPublishRate(b, js)
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		streamOne(b, nc, client, js, raw, "stream_window_off", -1)
		streamOne(b, nc, client, js, raw, "stream", worker.DefaultChunkWindow)
	}
}

func streamOne(b *testing.B, nc *nats.Conn, client *parent.Client, js jetstream.JetStream, raw float64, label string, window time.Duration) {
	const chunks = 20_000
	ctx := context.Background()
	line := strings.Repeat("x", 100)
	took := make(chan time.Duration, 1)
	w := startWorkerConfig(b, nc, worker.Config{Concurrency: 1, ChunkWindow: window}, label, func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		t0 := time.Now()
		for range chunks {
			if err := run.Chunk(ctx, line); err != nil {
				return worker.Result{}, err
			}
		}
		// Until every chunk is stored: a coalesced stream's last events
		// are still open or in flight when the loop ends.
		if err := run.Flush(ctx); err != nil {
			return worker.Result{}, err
		}
		took <- time.Since(t0)
		return worker.Result{}, nil
	})
	defer func() { _ = w.Stop() }()
	id := label + "-1"
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: label, RunID: id, Input: 1}); err != nil {
		b.Fatal(err)
	}
	var d time.Duration
	select {
	case d = <-took:
	case <-time.After(5 * time.Minute):
		b.Fatal("20,000 chunks not emitted within 5 minutes")
	}
	natstest.Eventually(b, time.Minute, func() bool {
		row, err := client.Inspect(ctx, id)
		return err == nil && row.Status.Final()
	}, "run %s did not end", id)
	replayRaw, replay, n := replayVersusRaw(b, js, id)
	rate := chunks / d.Seconds()
	b.ReportMetric(rate, "chunks/s-"+label)
	b.ReportMetric(rate/raw, "chunks-per-raw-msg-"+label)
	report(label, "chunks", chunks, "chunk_bytes", len(line), "window_ms", ms(max(window, 0)), "raw_async_pub_per_s", raw,
		"chunks_per_s", rate, "chunks_vs_raw_async_pub", rate/raw, "goal_chunks_vs_raw", 0.5)
	report(label+"_replay", "events", n, "raw_ordered_ms", ms(replayRaw), "replay_ms", ms(replay),
		"raw_ordered_per_s", float64(n)/replayRaw.Seconds(), "replay_per_s", float64(n)/replay.Seconds(),
		"replay_vs_raw_ordered", replayRaw.Seconds()/replay.Seconds(), "goal_replay_vs_raw", 0.9,
		"replay_chunks_per_s", chunks/replay.Seconds())
}

// requestCounter sees every message on the server (a ">" subscription) and
// counts, per inbox prefix, those carrying a reply subject under it: the
// requests a connection with that inbox prefix sent (JetStream API calls,
// KV reads and writes, publishes awaiting their ack, pull requests, acks
// that wait for a confirmation), synchronous or not.
type requestCounter struct {
	mu       sync.Mutex
	prefixes []string
	total    map[string]int
	byKind   map[string]map[string]int
}

func newRequestCounter(b *testing.B, nc *nats.Conn, prefixes ...string) *requestCounter {
	b.Helper()
	rc := &requestCounter{prefixes: prefixes, total: map[string]int{}, byKind: map[string]map[string]int{}}
	for _, p := range prefixes {
		rc.byKind[p] = map[string]int{}
	}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		for _, p := range rc.prefixes {
			if strings.HasPrefix(m.Reply, p+".") {
				rc.mu.Lock()
				rc.total[p]++
				rc.byKind[p][subjectKind(m.Subject)]++
				rc.mu.Unlock()
				return
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	return rc
}

func (rc *requestCounter) reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, p := range rc.prefixes {
		rc.total[p] = 0
		rc.byKind[p] = map[string]int{}
	}
}

func (rc *requestCounter) count(prefix string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.total[prefix]
}

// subjectKind folds run ids, keys and consumer names out of a subject.
func subjectKind(s string) string {
	t := strings.Split(s, ".")
	switch {
	case strings.HasPrefix(s, "$KV.") && len(t) >= 2:
		return "$KV." + t[1] + ".<key>"
	case strings.HasPrefix(s, "$JS.ACK.") && len(t) >= 3:
		return "$JS.ACK." + t[2] + " (ack awaiting confirmation)"
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET.") && len(t) >= 5:
		return "$JS.API.DIRECT.GET." + t[4]
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT.") && len(t) >= 6:
		return "$JS.API.CONSUMER.MSG.NEXT." + t[5] + " (pull request)"
	case strings.HasPrefix(s, "$JS.API.") && len(t) >= 5:
		return strings.Join(t[:5], ".")
	case len(t) == 4 && t[1] == "run":
		return t[0] + ".run.<id>." + t[3]
	case len(t) >= 3 && t[1] == "signal":
		return t[0] + ".signal.<id>.<name>"
	}
	return s
}

func (rc *requestCounter) print(what, prefix string, runs int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	kinds := rc.byKind[prefix]
	keys := slices.SortedFunc(maps.Keys(kinds), func(a, b string) int { return kinds[b] - kinds[a] })
	for _, k := range keys {
		fmt.Printf("%s per_run=%.3f subject=%s\n", what, float64(kinds[k])/float64(runs), k)
	}
}

// BenchmarkWorkloadShortRunCost reports what one no-op run costs: stored
// writes per run by stream, and the requests the worker's own connection
// and the dispatching client's connection send per run.
func BenchmarkWorkloadShortRunCost(b *testing.B) {
	const n = 1_000
	ns := natstest.RunServer(b)
	nc := inProcess(b, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const workerInbox, clientInbox = "_INBOX_BENCHWORKER", "_INBOX_BENCHCLIENT"
	wnc := inProcess(b, ns, nats.CustomInboxPrefix(workerInbox))
	cnc := inProcess(b, ns, nats.CustomInboxPrefix(clientInbox))
	startWorker(b, wnc, concurrency, "noop", noop)
	client, err := parent.New(jetruntest.OpenRuntime(b, cnc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	rc := newRequestCounter(b, nc, workerInbox, clientInbox)
	lat := newLatencies(n)
	lat.follow(b, nc)
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}

	var before, after map[string]uint64
	var ws0, ws1 nats.Statistics
	for b.Loop() {
		before = storedByStream(b, js)
		rc.reset()
		ws0 = wnc.Stats()
		fanOut(b, n, dispatchers, func(i int) error {
			id := fmt.Sprintf("cost-%d", i)
			lat.start(id)
			_, err := client.Dispatch(ctx, parent.Request{AgentType: "noop", RunID: id, Input: 1})
			return err
		})
		lat.wait(b, "runs completed")
		// Let the last runs' trailing requests (acks, index removal) land.
		for last := -1; last != rc.count(workerInbox); {
			last = rc.count(workerInbox)
			time.Sleep(300 * time.Millisecond)
		}
		ws1 = wnc.Stats()
		after = storedByStream(b, js)
	}
	var total uint64
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		d := after[name] - before[name]
		total += d
		if d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%.2f", name, float64(d)/n))
		}
	}
	b.ReportMetric(float64(total)/n, "js-writes/run")
	b.ReportMetric(float64(rc.count(workerInbox))/n, "worker-requests/run")
	report("shortruns", "runs", n, "stored_writes_per_run", float64(total)/n)
	fmt.Printf("shortruns stored_writes_per_run_by_stream %s\n", strings.Join(parts, " "))
	report("shortruns", "worker_requests_per_run", float64(rc.count(workerInbox))/n,
		"client_requests_per_run", float64(rc.count(clientInbox))/n,
		"worker_conn_out_msgs_per_run", float64(ws1.OutMsgs-ws0.OutMsgs)/n,
		"worker_conn_in_msgs_per_run", float64(ws1.InMsgs-ws0.InMsgs)/n)
	b.Logf("requests = messages sent with a reply inbox of that connection (JetStream API calls, KV reads/writes, " +
		"publishes awaiting an ack, pull requests, acks awaiting confirmation; async ones included); " +
		"out/in msgs = nats.Conn.Stats of the worker's dedicated connection (every publish, ack and reply)")
	rc.print("shortruns worker_requests", workerInbox, n)
	rc.print("shortruns client_requests", clientInbox, n)
	// Last: its runs' requests are not the client's runs'.
	plain := plainPublishWrites(b, js, nc, n)
	b.ReportMetric(plain, "plain-js-writes/run")
	report("shortruns", "plain_publish_stored_writes_per_run", plain)
}

// BenchmarkWorkloadPacedLatency dispatches 2,000 no-op runs at a steady
// 200 runs/s over TCP loopback and reports dispatch→completed p50/p99, beside
// raw publish-with-ack round trips at the same pace over TCP.
func BenchmarkWorkloadPacedLatency(b *testing.B) {
	const (
		n     = 2_000
		every = 5 * time.Millisecond // 200/s
	)
	ns := natstest.RunServer(b)
	nc, js := natstest.Connect(b, ns)
	wnc, _ := natstest.Connect(b, ns)
	cnc, _ := natstest.Connect(b, ns)
	ctx := context.Background()
	// begun times dispatch → the handler's first line: what a model call
	// or a first token waits for before it can start.
	begun := newLatencies(n)
	startWorker(b, wnc, concurrency, "noop", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		begun.end(run.ID())
		return worker.Result{}, nil
	})
	client, err := parent.New(jetruntest.OpenRuntime(b, cnc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	lat := newLatencies(n)
	lat.follow(b, nc)
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}

	var raw, runs, starts []time.Duration
	for b.Loop() {
		// Raw: a publish awaiting its ack, at the same pace, over TCP.
		raw = raw[:0]
		tick := time.NewTicker(every)
		payload := make([]byte, 128)
		for range n {
			<-tick.C
			t0 := time.Now()
			if _, err := js.Publish(ctx, "raw.paced", payload); err != nil {
				b.Fatal(err)
			}
			raw = append(raw, time.Since(t0))
		}
		tick.Stop()

		// jetrun: open loop, one dispatch every 5ms whether or not the
		// last one returned.
		var wg sync.WaitGroup
		tick = time.NewTicker(every)
		for i := range n {
			<-tick.C
			id := fmt.Sprintf("paced-%d", i)
			lat.start(id)
			begun.start(id)
			wg.Go(func() {
				if _, err := client.Dispatch(ctx, parent.Request{AgentType: "noop", RunID: id, Input: 1}); err != nil {
					b.Error(err)
				}
			})
		}
		tick.Stop()
		wg.Wait()
		runs = lat.wait(b, "paced runs completed")
		starts = begun.wait(b, "paced runs' handlers started")
	}
	slices.Sort(raw)
	b.ReportMetric(ms(percentile(runs, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(runs, 0.99)), "p99-ms")
	report("paced", "runs", n, "rate_per_s", float64(time.Second/every), "transport", "tcp-loopback",
		"dispatch_to_completed_p50_ms", ms(percentile(runs, 0.5)), "dispatch_to_completed_p99_ms", ms(percentile(runs, 0.99)),
		"dispatch_to_handler_p50_ms", ms(percentile(starts, 0.5)), "dispatch_to_handler_p99_ms", ms(percentile(starts, 0.99)),
		"raw_publish_ack_p50_ms", ms(percentile(raw, 0.5)), "raw_publish_ack_p99_ms", ms(percentile(raw, 0.99)),
		"goal_p50_ms", 2.3, "goal_p99_ms", 3.9)
}

// plainPublishWrites publishes n no-op dispatches plainly (as any language
// does: docs/protocol.md), waits until every run completed, and returns the
// stored writes per run.
func plainPublishWrites(b *testing.B, js jetstream.JetStream, nc *nats.Conn, n int) float64 {
	b.Helper()
	lat := newLatencies(n)
	lat.follow(b, nc)
	sum := func(m map[string]uint64) (t uint64) {
		for _, v := range m {
			t += v
		}
		return t
	}
	before := sum(storedByStream(b, js))
	for i := range n {
		id := fmt.Sprintf("plain-cost-%d", i)
		lat.start(id)
		if _, err := js.PublishAsync("jetrun.dispatch.noop", fmt.Appendf(nil, `{"runId":%q,"input":1}`, id), jetstream.WithMsgID(id)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		b.Fatal("async publish stalled")
	}
	lat.wait(b, "plain-published runs completed")
	return float64(sum(storedByStream(b, js))-before) / float64(n)
}
