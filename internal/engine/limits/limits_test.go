package limits_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/fakeprovider"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

var full = flag.Bool("limits.full", false, "run the fleet test at the issue's scale: 8 workers × 50 runs (make test-limits)")

const ns = wire.Namespace("jetrun")

func openStore(t testing.TB, s *server.Server) *limits.Store {
	t.Helper()
	_, js := natstest.Connect(t, s)
	st, err := limits.Open(context.Background(), js, ns, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startLimiter starts a limiter on a connection of its own, as a worker
// process has.
func startLimiter(t testing.TB, s *server.Server, id string, lease time.Duration) *limits.Limiter {
	t.Helper()
	st := openStore(t, s)
	l, err := limits.New(limits.Config{Store: st, Worker: id, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Stop(context.Background()) })
	return l
}

func TestBadInputReservesNothing(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	st := openStore(t, s)
	ctx := context.Background()
	for _, bad := range []limits.Spec{
		{Name: "zero"},
		{Name: "neg", Requests: -1, Tokens: 10},
		{Name: "huge", Tokens: limits.MaxRate + 1},
		{Name: "bad.name", Requests: 1},
		{Name: "w", Requests: 1, Weights: map[string]int{"a": 0}},
	} {
		if err := st.Put(ctx, bad); !errors.Is(err, limits.ErrBadSpec) {
			t.Errorf("Put(%+v) = %v, want ErrBadSpec", bad, err)
		}
	}
	if specs, _ := st.Specs(ctx); len(specs) != 0 {
		t.Fatalf("bad specs were stored: %+v", specs)
	}
	if err := st.Put(ctx, limits.Spec{Name: "openai-gpt", Requests: 10, Tokens: 1000, Concurrent: 2}); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Spec{Name: "claude", Requests: 10}); err != nil {
		t.Fatal(err)
	}
	l := startLimiter(t, s, "w1", time.Second)
	_, err := l.Reserve(ctx, "gemini", "", 10)
	if !errors.Is(err, limits.ErrUnknownLimit) || !strings.Contains(err.Error(), "claude, openai-gpt") {
		t.Errorf("unknown limit: %v, want ErrUnknownLimit naming claude, openai-gpt", err)
	}
	for _, tokens := range []int64{-1, 1001, limits.MaxRate + 1} {
		if _, err := l.Reserve(ctx, "openai-gpt", "", tokens); !errors.Is(err, limits.ErrBadReservation) {
			t.Errorf("Reserve(%d tokens) = %v, want ErrBadReservation", tokens, err)
		}
	}
	if _, err := l.Reserve(ctx, "openai-gpt", "a.b", 1); !errors.Is(err, limits.ErrBadReservation) {
		t.Errorf("bad tenant: %v, want ErrBadReservation", err)
	}
	stat, err := st.Status(ctx, "openai-gpt")
	if err != nil {
		t.Fatal(err)
	}
	if stat.Pool.Requests != 0 || stat.Pool.Tokens != 0 || len(stat.Pool.Holders) != 0 {
		t.Fatalf("bad reservations took from the pool: %+v", stat.Pool)
	}
	specs, err := limits.ParseSpecs("a:requests=0;b:requests=-3;c:tokens=5,window=soon")
	if err == nil || len(specs) != 0 {
		t.Fatalf("ParseSpecs of zero/negative rates = %+v, %v; want errors", specs, err)
	}
	for _, want := range []string{"requests=\"0\"", "requests=\"-3\"", "window \"soon\""} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSpecs error %q does not name %s", err, want)
		}
	}
}

// TestConcurrentSlotsAreSharedAndReturned: a limit of 3 concurrent calls
// across two workers; the fourth waits until one is released, and a
// waiting reservation ends with its context, reserving nothing.
func TestConcurrentSlotsAreSharedAndReturned(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	st := openStore(t, s)
	ctx := context.Background()
	if err := st.Put(ctx, limits.Spec{Name: "slots", Concurrent: 3}); err != nil {
		t.Fatal(err)
	}
	a := startLimiter(t, s, "a", 5*time.Second)
	b := startLimiter(t, s, "b", 5*time.Second)
	var held []*limits.Grant
	for _, l := range []*limits.Limiter{a, a, b} {
		g, err := l.Reserve(ctx, "slots", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, g)
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Reserve(cctx, "slots", "", 0)
		errc <- err
	}()
	natstest.Eventually(t, 10*time.Second, func() bool { return b.Waiting("slots") == 1 }, "the fourth reservation waits")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait = %v, want context.Canceled", err)
	}
	got := make(chan *limits.Grant, 1)
	go func() {
		g, err := b.Reserve(ctx, "slots", "", 0)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	natstest.Eventually(t, 10*time.Second, func() bool { return b.Waiting("slots") == 1 }, "the fifth reservation waits")
	held[0].Release() // a's slot: a gives it back since b waits
	g := <-got
	if g == nil {
		t.Fatal("no grant after a release")
	}
	stat, err := st.Status(ctx, "slots")
	if err != nil {
		t.Fatal(err)
	}
	var slots int64
	for _, h := range stat.Pool.Holders {
		slots += h.Concurrent
	}
	if slots > 3 {
		t.Fatalf("the pool hands out %d slots of 3: %+v", slots, stat.Pool.Holders)
	}
}

// fleet is the fake-provider test's shape.
type fleet struct {
	workers, runs int
	window        time.Duration
	windows       int   // full windows measured
	tokens        int64 // the limit's and the provider's, per window
	estimate      int64 // reserved per call; a call uses half to all of it
	packed        bool  // every run of the small tenant on the first worker
}

// tenantOf returns the tenant of run r of worker w: one run in 11 is the
// small tenant's (a 10:1 load), spread over the workers or, packed, all on
// worker 0.
func (f fleet) tenantOf(w, r int) string {
	small := (w*f.runs+r)%11 == 0
	if f.packed {
		small = w == 0 && r < (f.workers*f.runs+10)/11
	}
	if small {
		return "small"
	}
	return "big"
}

// TestFleetAgainstFakeProvider runs workers × runs callers (two tenants at
// 10:1 load, weights 3:1) against one limit that matches a fake
// provider's, overloads the provider once, and checks the provider's own
// counters: each full window's tokens within 5 % of the limit, no 429 to a
// call granted after its worker saw the pause, each tenant within 10 % of
// its weighted share.
//
// Two layouts: the small tenant's runs spread over the workers, and all on
// one worker (which then gets the small tenant's share of the fleet's
// window, not a worker's).
func TestFleetAgainstFakeProvider(t *testing.T) {
	shape := fleet{workers: 3, runs: 22, window: 4 * time.Second, windows: 5, tokens: 4000, estimate: 50}
	if *full {
		shape = fleet{workers: 8, runs: 50, window: 3 * time.Second, windows: 6, tokens: 20000, estimate: 100}
	}
	for _, packed := range []bool{false, true} {
		shape.packed = packed
		t.Run(map[bool]string{false: "spread", true: "packed"}[packed], func(t *testing.T) { fleetAgainstFakeProvider(t, shape) })
	}
}

func fleetAgainstFakeProvider(t *testing.T, shape fleet) {
	tokens, estimate := shape.tokens, shape.estimate
	p := &fakeprovider.Provider{Tokens: tokens, Window: shape.window}
	p.Start()
	defer p.Close()
	s := natstest.RunServer(t)
	st := openStore(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec := limits.Spec{Name: "fake", Tokens: tokens, WindowMs: shape.window.Milliseconds(), Weights: map[string]int{"big": 3, "small": 1}}
	if err := st.Put(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var (
		lateRejects atomic.Int64 // 429s to calls granted after their worker saw a pause
		firstPauses atomic.Int64
		calls       atomic.Int64
		wg          sync.WaitGroup
		httpc       = &http.Client{Timeout: 10 * time.Second}
	)
	var lims []*limits.Limiter
	defer func() {
		var c [4]int64
		for _, l := range lims {
			n := l.Counts()
			c[0] += n.Granted.Load()
			c[1] += n.Writes.Load()
			c[2] += n.Conflicts.Load()
			c[3] += n.Reads.Load()
		}
		t.Logf("granted %d, pool writes %d, conflicts %d, reads %d", c[0], c[1], c[2], c[3])
	}()
	for w := range shape.workers {
		l := startLimiter(t, s, fmt.Sprintf("w%d", w), 3*shape.window)
		lims = append(lims, l)
		for r := range shape.runs {
			tenant := shape.tenantOf(w, r)
			wg.Add(1)
			// A run makes up to two calls at once (parallel tool
			// calls): its next reservation waits while a call is out.
			inflight := make(chan struct{}, 2)
			call := func(g *limits.Grant, used int64) {
				defer func() { <-inflight }()
				resp, err := httpc.Post(fmt.Sprintf("%s?tokens=%d&tenant=%s", p.URL(), used, tenant), "", nil)
				if err != nil {
					g.Release()
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				calls.Add(1)
				if resp.StatusCode != http.StatusTooManyRequests {
					g.Settle(used)
					return
				}
				if g.Pauses() > 0 {
					lateRejects.Add(1)
				} else {
					firstPauses.Add(1)
				}
				g.Release()
				_ = l.Pause(ctx, "fake", fakeprovider.RetryAfter(resp.Header), "provider 429")
			}
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), uint64(r)))
				for ctx.Err() == nil {
					inflight <- struct{}{}
					g, err := l.Reserve(ctx, "fake", tenant, estimate)
					if err != nil {
						return
					}
					used := estimate/2 + rng.Int64N(estimate/2+1)
					wg.Add(1)
					go func() {
						defer wg.Done()
						call(g, used)
					}()
				}
			}()
		}
	}
	// Let two windows pass, overload the provider for a window, then
	// measure.
	waitWindows(t, p, 2)
	p.Overload(shape.window)
	waitWindows(t, p, 3+shape.windows)
	cancel()
	wg.Wait()

	ws := p.Windows()
	t.Logf("%d calls, %d rejected (%d before the pause reached their worker)", calls.Load(), p.Rejected(), firstPauses.Load())
	if p.Rejected() == 0 {
		t.Fatal("the provider never answered 429: the overload did not happen")
	}
	if n := lateRejects.Load(); n > 0 {
		t.Errorf("%d calls granted after their worker saw the pause got 429", n)
	}
	var big, small int64
	measured := 0
	for _, w := range ws[1 : len(ws)-1] { // the first and last are partial
		t.Logf("window %d: %d requests, %d tokens (%.1f%% of the limit), %d rejected, tenants %v",
			w.Index, w.Requests, w.Tokens, 100*float64(w.Tokens)/float64(tokens), w.Rejected, w.Tenants)
		if w.Rejected > 0 || w.Tokens == 0 {
			continue // the overload and the pause it caused
		}
		measured++
		if w.Tokens < tokens*95/100 {
			t.Errorf("window %d consumed %d tokens; want within 5%% of %d", w.Index, w.Tokens, tokens)
		}
		big += w.Tenants["big"]
		small += w.Tenants["small"]
	}
	if measured < shape.windows-2 {
		t.Fatalf("only %d full windows without a pause; want %d", measured, shape.windows-2)
	}
	share := float64(small) / float64(big+small)
	t.Logf("tenant shares: big %.3f, small %.3f (weights 3:1 → 0.75, 0.25)", 1-share, share)
	for _, c := range []struct {
		tenant      string
		got, wanted float64
	}{{"small", share, 0.25}, {"big", 1 - share, 0.75}} {
		if c.got < c.wanted*0.9 || c.got > c.wanted*1.1 {
			t.Errorf("%s tenant's share %.3f; want within 10%% of %.2f", c.tenant, c.got, c.wanted)
		}
	}
}

// waitWindows waits until the provider has served n windows.
func waitWindows(t *testing.T, p *fakeprovider.Provider, n int) {
	t.Helper()
	natstest.Eventually(t, time.Duration(n+5)*time.Minute, func() bool { return len(p.Windows()) >= n },
		"the provider serves %d windows", n)
}
