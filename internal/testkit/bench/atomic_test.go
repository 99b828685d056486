package bench_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jspub"
)

// BenchmarkAtomicBatchDispatch compares two ways of storing 10,000
// dispatch-like messages (128 bytes, each with its Nats-Msg-Id) on
// nats-server as a process of its own, on a file stream that allows atomic
// publish: pipelined (every publish sent, each with its own
// acknowledgement, awaited together: what DispatchMany does) and in atomic
// batches (Nats-Batch-Id/-Sequence headers, the last one committing as a
// request: one acknowledgement per batch) of 256 and 1,000 messages, four
// batches in flight. It reports messages per second and the server's CPU
// per message for each. It is not part of make bench: it measured the
// choice docs/operations.md states ("Dispatching many").
func BenchmarkAtomicBatchDispatch(b *testing.B) {
	const n = 10_000
	nc, serverCPU := serverProcess(b)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	pub, err := jspub.New(js)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	ctx := context.Background()
	data := make([]byte, 128)
	stream := 0
	fresh := func() string {
		stream++
		name := fmt.Sprintf("D%d", stream)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
			Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Duplicates: 10 * time.Minute,
			AllowAtomicPublish: true}); err != nil {
			b.Fatal(err)
		}
		return name
	}
	measure := func(what string, store func(subject string)) {
		name := fresh()
		cpu0 := serverCPU()
		begin := time.Now()
		store(name + ".agent")
		elapsed, cpu := time.Since(begin), serverCPU()-cpu0
		s, err := js.Stream(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if info, err := s.Info(ctx); err != nil || info.State.Msgs != n {
			b.Fatalf("%s stored %+v, %v; want %d messages", what, info, err, n)
		}
		b.ReportMetric(n/elapsed.Seconds(), what+"-msgs/s")
		report("atomic_batch", "mode", what, "msgs", n, "msgs_per_s", n/elapsed.Seconds(),
			"server_cpu_us_per_msg", float64(cpu.Microseconds())/n)
	}
	msg := func(subject string, i int) *nats.Msg {
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, "run-"+strconv.Itoa(i))
		return m
	}
	for b.Loop() {
		measure("pipelined", func(subject string) {
			for start := 0; start < n; start += 1024 {
				var acks []*jspub.Pending
				for i := start; i < min(n, start+1024); i++ {
					acks = append(acks, pub.Send(msg(subject, i)))
				}
				for _, q := range acks {
					if ack, err := q.Ack(ctx); err != nil || ack.Duplicate {
						b.Fatalf("pipelined publish: %v %+v", err, ack)
					}
				}
			}
		})
		for _, size := range []int{256, 1000} {
			measure(fmt.Sprintf("atomic%d", size), func(subject string) {
				batches := make(chan int)
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						for start := range batches {
							atomicBatch(b, nc, pub, subject, start, min(n, start+size), msg)
						}
					})
				}
				for start := 0; start < n; start += size {
					batches <- start
				}
				close(batches)
				wg.Wait()
			})
		}
	}
}

// atomicBatch stores messages [from, to) as one atomic batch: every one
// but the last is published without a reply, the last commits it and
// carries its acknowledgement.
func atomicBatch(b *testing.B, nc *nats.Conn, pub *jspub.Publisher, subject string, from, to int, msg func(string, int) *nats.Msg) {
	id := nats.NewInbox()[len(nats.InboxPrefix):]
	for i := from; i < to; i++ {
		m := msg(subject, i)
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i-from+1))
		if i < to-1 {
			if err := nc.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		ack, err := pub.Publish(context.Background(), m)
		if err != nil {
			b.Fatalf("commit batch %s: %v", id, err)
		}
		if ack.Sequence == 0 {
			b.Fatalf("commit batch %s: %+v", id, ack)
		}
	}
}
