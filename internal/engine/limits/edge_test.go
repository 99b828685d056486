package limits_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/testkit/fakeprovider"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// TestGrantOpenAtTheRollCountsInTheNextWindow: a reservation granted at
// the very end of a window makes its call after the roll, where the
// provider counts it (fixed windows on the same clock). The fleet must
// not lease the whole next window again: another worker that reserves
// until the next window is used up gets no 429 past the provider's limit,
// and the window is still used to within 5 %.
func TestGrantOpenAtTheRollCountsInTheNextWindow(t *testing.T) {
	t.Parallel()
	const (
		window   = time.Second
		tokens   = 1000
		estimate = 100
	)
	p := &fakeprovider.Provider{Tokens: tokens, Window: window}
	p.Start()
	defer p.Close()
	s := natstest.RunServer(t)
	st := openStore(t, s)
	ctx := context.Background()
	if err := st.Put(ctx, limits.Spec{Name: "edge", Tokens: tokens, WindowMs: window.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	late := startLimiter(t, s, "late", 10*window)
	other := startLimiter(t, s, "other", 10*window)
	win := func() int64 { return time.Now().UnixMilli() / window.Milliseconds() }
	// In the last twentieth of a window, the late worker is granted a call
	// and makes it once the window has rolled.
	var (
		g *limits.Grant
		w int64
	)
	for g == nil {
		natstest.Eventually(t, 10*window, func() bool { return time.Now().UnixMilli()%window.Milliseconds() >= 950 },
			"the last twentieth of a window")
		w = win()
		r, err := late.Reserve(ctx, "edge", "", estimate)
		if err != nil {
			t.Fatal(err)
		}
		if win() == w {
			g = r
		} else {
			r.Release() // granted after the roll: try again
		}
	}
	natstest.Eventually(t, 10*window, func() bool { return win() > w }, "the window rolls")
	next := win()
	if code := callProvider(t, p, estimate); code != http.StatusOK {
		t.Fatalf("the late call: %d", code)
	}
	g.Settle(estimate)
	// The other worker reserves and calls until its grants come in a
	// later window.
	for {
		g, err := other.Reserve(ctx, "edge", "", estimate)
		if err != nil {
			t.Fatal(err)
		}
		if win() != next {
			g.Release()
			break
		}
		code := callProvider(t, p, estimate)
		g.Settle(estimate)
		if code != http.StatusOK {
			t.Errorf("a call granted in window %d got %d", next, code)
		}
	}
	for _, pw := range p.Windows() {
		if pw.Index != next {
			continue
		}
		t.Logf("window %d: %d tokens (%.1f%%), %d past the limit", pw.Index, pw.Tokens, 100*float64(pw.Tokens)/tokens, pw.OverLimit)
		if pw.OverLimit > 0 {
			t.Errorf("the provider rejected %d calls past its limit in the window after the roll", pw.OverLimit)
		}
		if pw.Tokens < tokens*95/100 {
			t.Errorf("the window after the roll used %d tokens; want within 5%% of %d", pw.Tokens, tokens)
		}
	}
}

// callProvider makes one call of tokens to p and returns its status.
func callProvider(t *testing.T, p *fakeprovider.Provider, tokens int64) int {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("%s?tokens=%d", p.URL(), tokens), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestCallAnsweredBeforeTheRollCountsInItsOwnWindow: a reservation granted
// in a window's last tenth and still open at the roll is charged to the
// next window too, in case its call reaches the provider after the roll.
// When its settle, made after the roll (a report late to reach its
// worker), says the call was answered before the roll, the provider
// counted it in the window it was granted in: the next window gets the
// charge back, and another worker uses it to within 5 %, with no call past
// the provider's limit.
func TestCallAnsweredBeforeTheRollCountsInItsOwnWindow(t *testing.T) {
	t.Parallel()
	const (
		window   = time.Second
		tokens   = 1000
		estimate = 100
	)
	p := &fakeprovider.Provider{Tokens: tokens, Window: window}
	p.Start()
	defer p.Close()
	s := natstest.RunServer(t)
	st := openStore(t, s)
	ctx := context.Background()
	if err := st.Put(ctx, limits.Spec{Name: "edge", Tokens: tokens, WindowMs: window.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	late := startLimiter(t, s, "late", 10*window)
	other := startLimiter(t, s, "other", 10*window)
	ms := window.Milliseconds()
	win := func() int64 { return time.Now().UnixMilli() / ms }
	// In the window's last tenth, the late worker is granted a call and
	// makes it at once; the provider answers well before the roll. The
	// grant stays open until the window has rolled.
	var next int64
	for next == 0 {
		natstest.Eventually(t, 10*window, func() bool { return time.Now().UnixMilli()%ms >= 910 }, "the last tenth of a window")
		w := win()
		g, err := late.Reserve(ctx, "edge", "", estimate)
		if err != nil {
			t.Fatal(err)
		}
		if win() != w {
			g.Release() // granted after the roll: again
			continue
		}
		code := callProvider(t, p, estimate)
		answered := time.Now()
		natstest.Eventually(t, 10*window, func() bool { return win() > w }, "the window rolls")
		g.SettleAnswered(estimate, answered)
		if code == http.StatusOK && answered.UnixMilli()%ms < 980 && answered.UnixMilli()/ms == w {
			next = w + 1 // else answered too near the roll (or after it): again
		}
	}
	// The other worker reserves and calls until its grants come in a
	// later window.
	for {
		g, err := other.Reserve(ctx, "edge", "", estimate)
		if err != nil {
			t.Fatal(err)
		}
		if win() != next {
			g.Release()
			break
		}
		code := callProvider(t, p, estimate)
		g.Settle(estimate)
		if code != http.StatusOK {
			t.Errorf("a call granted in window %d got %d", next, code)
		}
	}
	for _, pw := range p.Windows() {
		if pw.Index != next {
			continue
		}
		t.Logf("window %d: %d tokens (%.1f%%), %d past the limit", pw.Index, pw.Tokens, 100*float64(pw.Tokens)/tokens, pw.OverLimit)
		if pw.OverLimit > 0 {
			t.Errorf("the provider rejected %d calls past its limit in the window after the roll", pw.OverLimit)
		}
		if pw.Tokens < tokens*95/100 {
			t.Errorf("the window after the roll used %d tokens; want within 5%% of %d: the call answered before the roll was charged to it", pw.Tokens, tokens)
		}
	}
}

// TestAClaimNotTakenIsFreedInTheWindowsLastQuarter: a holder that
// reported reservations waiting is entitled to a part of the window,
// which the other workers leave it; when it never takes it (here a
// holder written to the pool that never comes back, like a worker killed
// while its runs waited), the others stop leaving it that room in the
// window's last quarter, so a worker that wants the window uses it to
// within one reservation's estimate.
func TestAClaimNotTakenIsFreedInTheWindowsLastQuarter(t *testing.T) {
	t.Parallel()
	const (
		window   = time.Second
		tokens   = 1000
		estimate = 100
	)
	s := natstest.RunServer(t)
	st := openStore(t, s)
	ctx := context.Background()
	if err := st.Put(ctx, limits.Spec{Name: "claim", Tokens: tokens, WindowMs: window.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	ms := window.Milliseconds()
	win := func() int64 { return time.Now().UnixMilli() / ms }
	natstest.Eventually(t, 10*window, func() bool { return time.Now().UnixMilli()%ms < ms/10 }, "the first tenth of a window")
	w := win()
	// A holder with ten reservations waiting, reported in window w, that
	// never takes its part nor renews.
	_, js := natstest.Connect(t, s)
	kv, err := js.KeyValue(ctx, ns.LimitsBucket())
	if err != nil {
		t.Fatal(err)
	}
	ghost := limits.Pool{Window: w, Holders: map[string]limits.Holder{"ghost": {
		UntilMs: time.Now().Add(time.Minute).UnixMilli(), Waiting: 10, Tenants: map[string]int64{limits.DefaultTenant: 10}, Seen: w,
	}}}
	data, err := json.Marshal(ghost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "pool.claim", data); err != nil {
		t.Fatal(err)
	}
	worker := startLimiter(t, s, "worker", 10*window)
	var granted int64
	for {
		g, err := worker.Reserve(ctx, "claim", "", estimate)
		if err != nil {
			t.Fatal(err)
		}
		if win() != w {
			g.Release()
			break
		}
		granted += estimate
		g.Settle(estimate)
	}
	t.Logf("window %d: %d of %d tokens granted beside the claim of a holder that never took it", w, granted, tokens)
	if granted < tokens-estimate {
		t.Errorf("the worker was granted %d tokens of window %d; want at least %d: the unused claim held room back till the roll", granted, w, tokens-estimate)
	}
}
