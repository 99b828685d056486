package worker

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// Defaults used where Config leaves a field zero.
const (
	DefaultConcurrency      = 16
	DefaultFleetConcurrency = 100_000
	DefaultLease            = 15 * time.Second
	DefaultMaxAttempts      = 5
	DefaultProgressInterval = 200 * time.Millisecond
	DefaultRowSyncInterval  = 500 * time.Millisecond
	DefaultChunkWindow      = 50 * time.Millisecond
	DefaultClaimWindow      = 50 * time.Millisecond

	// MinLease is the shortest lease accepted.
	MinLease = time.Second
)

// Config configures a Worker. The zero value is usable: every field has a
// documented default.
type Config struct {
	// ID names this worker process on run rows (default: host-pid-random).
	ID string
	// Concurrency is how many runs of each agent type this process executes
	// at once (default 16): how many handlers run at once. An attempt whose
	// handler returned gives its slot back while it stores its end (its
	// final row and status event), so the next run starts meanwhile; up to
	// Concurrency attempts of a type end that way at once, so a process
	// holds at most twice Concurrency runs of a type.
	Concurrency int
	// FleetConcurrency caps the runs of one agent type in flight across every
	// worker process, through the consumer's MaxAckPending (default
	// 100,000: in practice the workers' Concurrency is the bound).
	// Every worker of an agent type should use the same value: the last one
	// started sets it.
	FleetConcurrency int
	// Lease is how long a worker process is taken for alive after its last
	// renewal (the TTL of its liveness key, renewed every third of it, one
	// write for all its runs); a run whose worker died is taken over by
	// another within about one lease (default 15s). It is also the dispatch
	// consumer's AckWait.
	Lease time.Duration
	// MaxAttempts bounds how many times a run is taken over after its worker
	// was lost (graceful hand-backs do not count); the run then ends "error"
	// with reason "max-attempts" (default 5). Attempts a handler asked for
	// with jetruntype.RetryAfter count too; when they run out the run ends
	// "error" with reason "handler-error".
	MaxAttempts int
	// ProgressInterval is the progress coalescing window: at most one progress
	// event per window, the latest value flushed at its end (default 200ms).
	ProgressInterval time.Duration
	// ChunkWindow is the chunk coalescing window. A run's chunk leaves at
	// once when the run is quiet: it emitted no chunk within the window
	// before, and every event it published is acknowledged. Otherwise the
	// chunk opens a batch that leaves when its window ends (or another
	// event of the run is published, or Flush), with the chunks emitted
	// meanwhile, as one stored chunk event carrying their range, which
	// readers (Replay, SSE, the UI, the CLI) see one by one as before. So
	// a chunk waits at most the window, and a steady stream is stored as
	// about one event per window (default 50ms). A negative window turns
	// coalescing off: one event per chunk.
	ChunkWindow time.Duration
	// ClaimWindow is how long a run's first attempt may run before it
	// claims the run (default 50ms). A handler that returns within it,
	// having asked its Run for nothing that leaves a trace (a chunk,
	// progress, a milestone, a step, usage, a wait, a call, a nested
	// run, a park), stores its ending only: the final row, written by a
	// compare-and-set against the row it was dispatched with (or
	// created), and one status event carrying its attempt and its start.
	// A handler that asks for any of those, or runs longer, claims the
	// run then, as it would have at its start. Only top-level runs that
	// are not detached and have no budget or concurrency key wait to be
	// claimed. Negative: every attempt claims at once. At most a sixth
	// of the lease.
	ClaimWindow time.Duration
	// RowSyncInterval bounds how often a run's row is updated with its
	// progress snapshot and signal time (default 500ms).
	RowSyncInterval time.Duration
	// MaxDepth is the deepest nesting accepted from a dispatch (default 8);
	// deeper dispatches are dead-lettered.
	MaxDepth int
	// Logger receives the worker's logs (default: discard).
	Logger *slog.Logger
	// Observer, if set, is told of every attempt's start and end and of
	// every dead-lettered dispatch (for metrics).
	Observer Observer
}

func (c Config) withDefaults() Config {
	c.ID = cmp.Or(c.ID, defaultWorkerID())
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.FleetConcurrency = cmp.Or(c.FleetConcurrency, DefaultFleetConcurrency)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.ProgressInterval = cmp.Or(c.ProgressInterval, DefaultProgressInterval)
	c.RowSyncInterval = cmp.Or(c.RowSyncInterval, DefaultRowSyncInterval)
	c.ChunkWindow = cmp.Or(c.ChunkWindow, DefaultChunkWindow)
	c.ClaimWindow = cmp.Or(c.ClaimWindow, DefaultClaimWindow)
	c.MaxDepth = cmp.Or(c.MaxDepth, events.DefaultMaxDepth)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate reports every invalid field at once.
func (c Config) validate() error {
	var errs []error
	if c.ID != "" {
		if err := events.ValidateID(c.ID); err != nil {
			errs = append(errs, fmt.Errorf("worker id: %w", err))
		}
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency must be positive, got %d", c.Concurrency))
	}
	if c.FleetConcurrency < 0 {
		errs = append(errs, fmt.Errorf("fleet concurrency must be positive, got %d", c.FleetConcurrency))
	}
	if c.Lease != 0 && c.Lease < MinLease {
		errs = append(errs, fmt.Errorf("lease must be at least %s, got %s", MinLease, c.Lease))
	}
	if lease := cmp.Or(c.Lease, DefaultLease); c.ClaimWindow > lease/6 {
		errs = append(errs, fmt.Errorf("claim window must be at most a sixth of the lease (%s), got %s", lease/6, c.ClaimWindow))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("max attempts must be positive, got %d", c.MaxAttempts))
	}
	for name, d := range map[string]time.Duration{
		"progress interval": c.ProgressInterval, "row sync interval": c.RowSyncInterval,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	return errors.Join(errs...)
}

// defaultWorkerID is host-pid-random, cut to a valid token.
func defaultWorkerID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, host)
	var b [3]byte
	_, _ = rand.Read(b[:])
	suffix := fmt.Sprintf("-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	if max := events.MaxIDLength - len(suffix); len(host) > max {
		host = host[:max]
	}
	return cmp.Or(host, "worker") + suffix
}
