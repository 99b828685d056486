package bench_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jspub"
)

// BenchmarkWorkloadBareRoundTrips works down 10,000 queued messages with bare
// nats.go calls shaped like a short run's round trips (a row read, a
// compare-and-set claim, a status event, a final compare-and-set, a final
// status event, an ack: BenchmarkWorkloadShortRunCost's count), at the
// burn-down's concurrency, and reports the rate as a ratio of raw async
// publish: the ceiling of any design with these round trips on this
// machine, which jetrun's burn-down is measured against. It waits for the
// answers two ways: through nats.go's requests (jetstream.KeyValue,
// jetstream.JetStream.Publish), which share the connection's lock, and
// through a reply subscription of its own (package jspub, what jetrun's
// run path uses).
func BenchmarkWorkloadBareRoundTrips(b *testing.B) {
	for _, process := range []bool{false, true} {
		for _, via := range []string{"natsgo_requests", "own_reply_subscription"} {
			name := via
			if process {
				name = "server_process/" + via
			}
			b.Run(name, func(b *testing.B) { bareRoundTrips(b, process, via) })
		}
	}
}

// bareRoundTrips is one phase of BenchmarkWorkloadBareRoundTrips, on an
// embedded server or on nats-server as a process of its own (over TCP).
func bareRoundTrips(b *testing.B, process bool, via string) {
	var js jetstream.JetStream
	var serverCPU func() time.Duration
	if process {
		var nc *nats.Conn
		nc, serverCPU = serverProcess(b)
		var err error
		if js, err = jetstream.New(nc); err != nil {
			b.Fatal(err)
		}
	} else {
		_, _, js = embeddedServer(b)
	}
	raw := rawAsyncPublishRate(b, js)
	var elapsed, cpu, server time.Duration
	for b.Loop() {
		var server0 time.Duration
		if serverCPU != nil {
			server0 = serverCPU()
		}
		elapsed, cpu = bareBurnDown(b, js, via == "own_reply_subscription")
		if serverCPU != nil {
			server = serverCPU() - server0
		}
	}
	rate := runs / elapsed.Seconds()
	figures := []any{"via", via, "runs", runs, "concurrency", concurrency,
		"raw_async_pub_per_s", raw, "runs_per_s", rate, "runs_vs_raw_async_pub", rate / raw,
		"cpu_us_per_run", float64((cpu + server).Microseconds()) / runs}
	name := "bare_round_trips"
	if process {
		name += "_server_process"
		figures = append(figures, "server_process_cpu_us_per_run", float64(server.Microseconds())/runs)
	}
	report(name, figures...)
}

// bareBurnDown queues runs messages and rows, then works them down; it
// returns the time and CPU the work-down took.
func bareBurnDown(b *testing.B, js jetstream.JetStream, own bool) (time.Duration, time.Duration) {
	b.Helper()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BARE_Q", Subjects: []string{"bare.q.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BARE_EV", Subjects: []string{"bare.ev.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bare_rows", Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	row, event := make([]byte, 400), make([]byte, 120) // about a short run's row and status event
	publishWindowed(b, js, runs, func(int) string { return "bare.q.noop" }, event)
	publishWindowed(b, js, runs, func(i int) string { return "$KV.bare_rows.r" + strconv.Itoa(i) }, row)
	cons, err := js.CreateOrUpdateConsumer(ctx, "BARE_Q", jetstream.ConsumerConfig{Durable: "bare", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: runs})
	if err != nil {
		b.Fatal(err)
	}
	pub, err := jspub.New(js)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()

	// The round trips of one run, either way.
	read := func(key string) (uint64, error) {
		if !own {
			e, err := kv.Get(ctx, key)
			if err != nil {
				return 0, err
			}
			return e.Revision(), nil
		}
		resp, err := pub.Request(ctx, nats.NewMsg("$JS.API.DIRECT.GET.KV_bare_rows.$KV.bare_rows."+key))
		if err != nil {
			return 0, err
		}
		return strconv.ParseUint(resp.Header.Get(jetstream.SequenceHeader), 10, 64)
	}
	write := func(key string, rev uint64) (uint64, error) {
		if !own {
			return kv.Update(ctx, key, row, rev)
		}
		m := nats.NewMsg("$KV.bare_rows." + key)
		m.Data = row
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
		ack, err := pub.Publish(ctx, m)
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	status := func(key string) error {
		m := nats.NewMsg("bare.ev." + key + ".status")
		m.Data = event
		var err error
		if own {
			_, err = pub.Publish(ctx, m)
		} else {
			_, err = js.PublishMsg(ctx, m)
		}
		return err
	}
	run := func(msg jetstream.Msg, key string) error {
		rev, err := read(key)
		if err == nil {
			rev, err = write(key, rev)
		}
		if err == nil {
			err = status(key)
		}
		if err == nil {
			_, err = write(key, rev)
		}
		if err == nil {
			err = status(key)
		}
		if err == nil {
			err = msg.Ack()
		}
		return err
	}

	begin, cpu0 := time.Now(), cpuTime()
	msgs, err := cons.Messages(jetstream.PullMaxMessages(concurrency))
	if err != nil {
		b.Fatal(err)
	}
	defer msgs.Stop()
	slots := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i := range runs {
		msg, err := msgs.Next()
		if err != nil {
			b.Fatal(err)
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := run(msg, "r"+strconv.Itoa(i)); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	return time.Since(begin), cpuTime() - cpu0
}
