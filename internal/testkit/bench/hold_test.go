package bench_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
)

// BenchmarkScaleInFlightDeployed holds 10,000 and then 100,000 runs in
// handlers that wait inside Run.Park (as a run waiting on a signal, a
// call's reply or a child does), deployed: nats-server runs as a process of
// its own, so cpu_pct_of_one_core is this process's (the worker's, beside
// an idle client) and server_process_cpu_pct_of_one_core the server's.
// Issue 40 asks 100,000 held for at most 5 % of a core and 8 KB of heap a
// run. The 10,000 runs are also held without parking, for comparison.
func BenchmarkScaleInFlightDeployed(b *testing.B) {
	for _, c := range []struct {
		n    int
		park bool
	}{{10_000, false}, {10_000, true}, {100_000, true}} {
		b.Run(fmt.Sprintf("runs=%d/parked=%t", c.n, c.park), func(b *testing.B) {
			for b.Loop() {
				nc, serverCPU := serverProcess(b)
				connect := func() *nats.Conn {
					c, err := nats.Connect(nc.ConnectedUrl())
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(c.Close)
					return c
				}
				inFlight(b, fmt.Sprintf("inflight deployed runs=%d parked=%t", c.n, c.park), c.n, c.park, connect, serverCPU)
			}
		})
	}
}
