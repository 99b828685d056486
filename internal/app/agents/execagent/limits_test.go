package execagent_test

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/fakeprovider"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

var limitsFull = flag.Bool("limits.full", false, "run TestPythonChildrenShareALimit at 8 workers × 50 runs (make test-limits)")

// python returns the Python interpreter itself (not a shim that starts it).
func python(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// Python exec children on several workers call a fake provider through
// one provider limit with reserve lines, two tenants at 10:1 (weights
// 3:1); the provider is overloaded once and a child's 429 (a retryable
// error line with the delay) pauses the limit for the fleet. Every run
// completes; the provider answers no 429 but the overload's (none past its
// own limits, none after the pause). A window is measured when demand
// exceeded the limit all through it: at every moment some child's reserve
// line was waiting for its answer (the children tell the provider when
// theirs waited), and the limit was not paused. Each measured window uses
// the limit to within 5 %. At full scale the small tenant gets its
// weighted share (1/4) to within 10 %, over the measured windows in which
// each tenant had a reservation waiting all through.
func TestPythonChildrenShareALimit(t *testing.T) {
	shape := struct {
		workers, runs, calls int
		window               time.Duration
		tokens, estimate     int64
	}{2, 6, 24, 4 * time.Second, 1500, 50}
	if *limitsFull {
		// About 57,000 tokens: 38 windows of 1,500, two and a half
		// minutes against the provider.
		shape.workers, shape.runs, shape.calls = 8, 50, 4
	}
	p := &fakeprovider.Provider{Tokens: shape.tokens, Window: shape.window}
	p.Start()
	defer p.Close()
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	ctx := context.Background()
	st, err := limits.Open(ctx, js, wire.Namespace("jetrun"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Spec{Name: "fake", Tokens: shape.tokens, WindowMs: shape.window.Milliseconds(),
		Weights: map[string]int{"big": 3, "small": 1}}); err != nil {
		t.Fatal(err)
	}
	child := execagent.Config{Path: python(t), Args: []string{script("limitcaller.py").Path}}
	var client *parent.Client
	for i := range shape.workers {
		nc, _ := natstest.Connect(t, ns)
		rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
		w, err := agents.StartPool(ctx, rt, worker.Config{ID: fmt.Sprintf("py%d", i), Concurrency: shape.runs, MaxAttempts: 20},
			nil, agents.Configured{Exec: map[string]execagent.Config{"pycaller": child}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop() })
		if client == nil {
			if client, err = parent.New(rt, parent.Config{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var reqs []parent.Request
	for i := range shape.workers * shape.runs {
		tenant := "big"
		if i%11 == 0 {
			tenant = "small"
		}
		reqs = append(reqs, parent.Request{AgentType: "pycaller", RunID: fmt.Sprintf("py-%d", i), Tenant: tenant,
			Input: map[string]any{"url": p.URL(), "calls": shape.calls, "estimate": shape.estimate, "limit": "fake", "tenant": tenant}})
	}
	done := make(chan []parent.Outcome, 1)
	go func() { done <- client.RunAll(ctx, reqs) }()
	natstest.Eventually(t, 5*time.Minute, func() bool { return len(p.Windows()) >= 2 }, "the provider serves two windows")
	overloadFrom := time.Now()
	p.Overload(shape.window / 2)
	overloadUntil := time.Now().Add(shape.window / 2) // not before the provider's
	for _, o := range <-done {
		if o.Err != nil {
			t.Errorf("run %s: %v", o.RunID, o.Err)
		} else if o.Result.Row.Status != events.StatusCompleted {
			t.Errorf("run %s: %s", o.RunID, o.Result.Row.Status)
		}
	}
	rule := fakeprovider.Rule(*limitsFull)
	statuses, err := st.Statuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range statuses {
		t.Logf("limit %s: paused until %s, %s after the overload ended (%d pauses)", s.Spec.Name,
			s.Pause.Until().Format("15:04:05.000"), s.Pause.Until().Sub(overloadUntil), s.Pause.Count)
	}
	calls := p.Calls()
	// A window is full when a reservation waited all through it, outside
	// the overload. It is measured when its neighbours are full too: the
	// limiter charges a grant made in a window's last tenth and still open
	// at the roll to the next window, so a window beside one without full
	// demand gives or takes the tokens of that edge.
	full := map[int64]bool{}
	for _, w := range p.Windows() {
		start := time.UnixMilli(w.Index * shape.window.Milliseconds())
		end := start.Add(shape.window)
		paused := end.After(overloadFrom) && start.Before(overloadUntil) || w.Rejected > 0
		full[w.Index] = !paused && waitedThrough(calls, start, end, "")
	}
	var overLimit, measured, shared, big, small int64
	for _, w := range p.Windows() {
		overLimit += w.OverLimit
		start := time.UnixMilli(w.Index * shape.window.Milliseconds())
		end := start.Add(shape.window)
		steady := full[w.Index-1] && full[w.Index] && full[w.Index+1]
		t.Logf("window %d: %d requests, %d tokens (%.1f%%), %d rejected (%d past the limit), tenants %v, full %v, measured %v",
			w.Index, w.Requests, w.Tokens, 100*float64(w.Tokens)/float64(shape.tokens), w.Rejected, w.OverLimit, w.Tenants, full[w.Index], steady)
		if !steady {
			continue // runs starting or finishing, the limit paused, or beside such a window
		}
		measured++
		if w.Tokens < shape.tokens*int64(rule.MinPercent)/100 {
			t.Errorf("window %d used %d tokens; want at least %d%% of %d", w.Index, w.Tokens, rule.MinPercent, shape.tokens)
		}
		if waitedThrough(calls, start, end, "small") && waitedThrough(calls, start, end, "big") {
			shared++
			big += w.Tenants["big"]
			small += w.Tenants["small"]
		}
	}
	if p.Rejected() == 0 {
		t.Fatal("the provider never answered 429: no overload happened")
	}
	if overLimit > rule.MaxOver {
		t.Errorf("the provider rejected %d calls past its own limits; want at most %d", overLimit, rule.MaxOver)
	}
	var late int64
	for _, c := range calls {
		if c.Outcome == fakeprovider.Rejected && c.Arrived.After(overloadUntil) {
			if late++; late > rule.MaxOver {
				t.Errorf("run %s's call was answered 429 %s after the overload ended", c.Run, c.Arrived.Sub(overloadUntil))
			}
		}
	}
	if measured == 0 {
		t.Fatal("no window to measure: never three windows in a row with a reservation waiting all through, outside the overload")
	}
	share := 0.0
	if shared > 0 {
		share = float64(small) / float64(big+small)
	}
	t.Logf("%d windows measured; small tenant's share %.3f over %d of them (weights 3:1 → 0.25)", measured, share, shared)
	if *limitsFull && (shared == 0 || share < 0.25*0.9 || share > 0.25*1.1) {
		t.Errorf("the small tenant got %.3f over %d windows; want 0.25 within 10 %%", share, shared)
	}
}

// waitedThrough reports whether, at every moment from start to end, a
// reservation (of tenant, or any) was waiting for its answer.
func waitedThrough(calls []fakeprovider.Call, start, end time.Time, tenant string) bool {
	var waits [][2]time.Time
	for _, c := range calls {
		if (tenant == "" || c.Tenant == tenant) && !c.Waited[0].IsZero() {
			waits = append(waits, c.Waited)
		}
	}
	slices.SortFunc(waits, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	covered := start
	for _, w := range waits {
		if w[0].After(covered) {
			break
		}
		if w[1].After(covered) {
			covered = w[1]
		}
		if !covered.Before(end) {
			return true
		}
	}
	return false
}
