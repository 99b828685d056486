// Package bench measures jetrun against raw JetStream on the same embedded,
// file-store nats-server in the same run, and reports ratios: make bench.
//
// BenchmarkScaleInFlightDeployed holds other sizes of parked runs with
// JETRUN_BENCH_INFLIGHT=10000,20000,40000, and writes a CPU profile of the
// worker's process per phase (and a heap profile while the runs wait) to the
// folder JETRUN_BENCH_PROFILE names: each phase's per-run figures then show
// which cost grows faster than the runs. BenchmarkWorkloadBulkDispatch
// writes there, with JETRUN_BENCH_PROFILE set, CPU profiles of its two
// work-downs (DispatchMany's and plain publish's), the worker's process and
// (server_process) the nats-server's, one pair per run: go tool pprof
// merges several.
package bench
