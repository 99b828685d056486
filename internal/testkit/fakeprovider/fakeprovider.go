// Package fakeprovider is a model provider for tests: an HTTP server on
// 127.0.0.1 that enforces its own requests and tokens per window (windows
// aligned on the Unix epoch, like jetrun's limits) and answers 429 with
// Retry-After (seconds) and retry-after-ms past them, or while told to be
// overloaded. It counts what it served per window and per tenant, so tests
// assert against the provider's own counters, not a clock.
package fakeprovider

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Window is what the provider served in one window.
type Window struct {
	Index    int64
	Requests int64
	Tokens   int64
	Tenants  map[string]int64 // tokens per tenant
	Rejected int64            // 429s answered
	// OverLimit counts the 429s for the window's own limits (not an
	// overload): a limiter that keeps the fleet within the limits causes
	// none.
	OverLimit int64
}

// Provider is the fake provider. Its zero rates are unlimited.
type Provider struct {
	Requests int64         // per window
	Tokens   int64         // per window
	Window   time.Duration // window length

	srv           *httptest.Server
	mu            sync.Mutex
	windows       map[int64]*Window
	overloadUntil time.Time
	rejected      int64
}

// Start starts p on 127.0.0.1; Close stops it.
func (p *Provider) Start() {
	p.windows = map[int64]*Window{}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
}

// URL is the provider's call endpoint: POST it with query parameters
// tokens (input+output) and tenant.
func (p *Provider) URL() string { return p.srv.URL + "/v1/call" }

// Close stops the server.
func (p *Provider) Close() { p.srv.Close() }

// Overload makes the provider answer every call with 429 and a
// Retry-After of d for the next d.
func (p *Provider) Overload(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.overloadUntil = time.Now().Add(d)
}

// Rejected returns how many calls were answered 429.
func (p *Provider) Rejected() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rejected
}

// Windows returns the windows served so far, oldest first.
func (p *Provider) Windows() []Window {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Window, 0, len(p.windows))
	for _, k := range slices.Sorted(maps.Keys(p.windows)) {
		w := *p.windows[k]
		w.Tenants = maps.Clone(w.Tenants)
		out = append(out, w)
	}
	return out
}

func (p *Provider) serve(rw http.ResponseWriter, r *http.Request) {
	tokens, err := strconv.ParseInt(r.URL.Query().Get("tokens"), 10, 64)
	if err != nil || tokens < 0 {
		http.Error(rw, "tokens: want a whole number", http.StatusBadRequest)
		return
	}
	tenant := r.URL.Query().Get("tenant")
	now := time.Now()
	ms := p.Window.Milliseconds()
	idx := now.UnixMilli() / ms
	p.mu.Lock()
	w := p.windows[idx]
	if w == nil {
		w = &Window{Index: idx, Tenants: map[string]int64{}}
		p.windows[idx] = w
	}
	var retry time.Duration
	switch {
	case now.Before(p.overloadUntil):
		retry = p.overloadUntil.Sub(now)
	case p.Requests > 0 && w.Requests+1 > p.Requests, p.Tokens > 0 && w.Tokens+tokens > p.Tokens:
		retry = time.UnixMilli((idx + 1) * ms).Sub(now)
		w.OverLimit++
	}
	if retry > 0 {
		w.Rejected++
		p.rejected++
		p.mu.Unlock()
		rw.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
		rw.Header().Set("retry-after-ms", strconv.FormatInt(retry.Milliseconds()+1, 10))
		http.Error(rw, "rate limited", http.StatusTooManyRequests)
		return
	}
	w.Requests++
	w.Tokens += tokens
	w.Tenants[tenant] += tokens
	p.mu.Unlock()
	fmt.Fprintf(rw, `{"tokens":%d}`, tokens)
}

// RetryAfter reads the delay of a 429 answer: retry-after-ms, else
// Retry-After in seconds.
func RetryAfter(h http.Header) time.Duration {
	if ms, err := strconv.ParseInt(h.Get("retry-after-ms"), 10, 64); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	if s, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}
