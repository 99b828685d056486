package limits_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// BenchmarkLimitReservations measures reservations per second against
// one hot limit with several workers (a limiter each, on a connection of
// its own), each with many callers that reserve, settle and reserve again;
// and, for comparison, the same callers doing one compare-and-set per
// call on one key. It reports reservations/s and pool writes per 1,000
// reservations.
func BenchmarkLimitReservations(b *testing.B) {
	const workers, callers = 4, 16
	s := natstest.RunServer(b)
	st := openStore(b, s)
	ctx := context.Background()
	if err := st.Put(ctx, limits.Spec{Name: "hot", Requests: 1 << 30, Tokens: 1 << 38, WindowMs: 60_000}); err != nil {
		b.Fatal(err)
	}
	lims := make([]*limits.Limiter, workers)
	for i := range lims {
		lims[i] = startLimiter(b, s, fmt.Sprintf("bench%d", i), 10*time.Second)
	}
	b.Run("sliced", func(b *testing.B) {
		var n atomic.Int64
		start := time.Now()
		for b.Loop() {
			runCallers(workers, callers, 2000, func(w int) error {
				g, err := lims[w].Reserve(ctx, "hot", "t", 100)
				if err == nil {
					g.Settle(80)
					n.Add(1)
				}
				return err
			})
		}
		var writes int64
		for _, l := range lims {
			writes += l.Counts().Writes.Load() + l.Counts().Conflicts.Load()
		}
		b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "reservations/s")
		b.ReportMetric(1000*float64(writes)/float64(n.Load()), "pool-writes/1k")
	})
	b.Run("cas-per-call", func(b *testing.B) {
		kvs := make([]jetstream.KeyValue, workers)
		for i := range kvs {
			_, js := natstest.Connect(b, s)
			kv, err := js.KeyValue(ctx, ns.LimitsBucket())
			if err != nil {
				b.Fatal(err)
			}
			kvs[i] = kv
		}
		if _, err := kvs[0].Put(ctx, "naive", []byte("0")); err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		start := time.Now()
		for b.Loop() {
			runCallers(workers, callers, 200, func(w int) error {
				for {
					e, err := kvs[w].Get(ctx, "naive")
					if err != nil {
						return err
					}
					_, err = kvs[w].Update(ctx, "naive", []byte(fmt.Sprint(e.Revision())), e.Revision())
					if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
						continue
					}
					n.Add(1)
					return err
				}
			})
		}
		b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "reservations/s")
	})
}

// runCallers runs callers goroutines per worker, each calling fn per
// times.
func runCallers(workers, callers, per int, fn func(w int) error) {
	var wg sync.WaitGroup
	for w := range workers {
		for range callers {
			wg.Go(func() {
				for range per / callers {
					if fn(w) != nil {
						return
					}
				}
			})
		}
	}
	wg.Wait()
}
