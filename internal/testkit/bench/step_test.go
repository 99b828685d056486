package bench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// BenchmarkWorkloadStep measures a durable step (worker.Run.Step: run the
// work, store one fenced message, wait for its PubAck) against a raw
// synchronous JetStream publish of the same size on the same server, one
// after the other in one goroutine, and reports the ratio.
func BenchmarkWorkloadStep(b *testing.B) {
	const n = 5_000
	_, nc, js := embeddedServer(b)
	ctx := context.Background()
	output := strings.Repeat("x", 100) // a step message of about 200 bytes

	type timing struct {
		d   time.Duration
		err error
	}
	done := make(chan timing, 1)
	startWorker(b, nc, 1, "stepper", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		start := time.Now()
		for i := range n {
			if _, err := run.Step(ctx, fmt.Sprintf("s-%d", i), func(context.Context) (any, error) { return output, nil }); err != nil {
				done <- timing{err: err}
				return worker.Result{}, err
			}
		}
		done <- timing{d: time.Since(start)}
		return worker.Result{}, nil
	})
	client, err := parent.New(jetruntest.OpenRuntime(b, nc, jetrun.Config{}), parent.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	payload := []byte(fmt.Sprintf(`{"runId":"step-bench","name":"s-1000","output":%q,"attempt":1,"at":"2026-01-01T00:00:00Z"}`, output))

	rawRound := func(round int) time.Duration {
		start := time.Now()
		for j := range n {
			if _, err := js.Publish(ctx, "raw.step", payload, jetstream.WithMsgID(fmt.Sprintf("raw-%d-%d", round, j))); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	rawRound(-1) // warm up the server's file store as the worker's first events do

	var raw, step time.Duration
	i := 0
	for b.Loop() {
		raw = rawRound(i)
		if _, err := client.Dispatch(ctx, parent.Request{AgentType: "stepper", RunID: fmt.Sprintf("step-bench-%d", i), Input: 1}); err != nil {
			b.Fatal(err)
		}
		select {
		case got := <-done:
			if got.err != nil {
				b.Fatal(got.err)
			}
			step = got.d
		case <-time.After(5 * time.Minute):
			b.Fatal("the stepping run did not finish")
		}
		i++
	}
	b.ReportMetric(float64(step.Microseconds())/n, "µs/step")
	b.ReportMetric(float64(raw.Microseconds())/n, "µs/raw-sync-publish")
	b.ReportMetric(step.Seconds()/raw.Seconds(), "step-vs-raw")
	report("step", "steps", n, "us_per_step", float64(step.Microseconds())/n,
		"us_per_raw_sync_publish", float64(raw.Microseconds())/n, "ratio", step.Seconds()/raw.Seconds())
}
