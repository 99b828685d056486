package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// hookServer is a finish webhook that records every call.
type hookServer struct {
	*httptest.Server
	mu       sync.Mutex
	calls    map[string]int // runId.status → calls
	inFlight int
	// onCall, if set, runs inside the handler before it answers; returning
	// false makes the handler hang until the caller goes away.
	onCall func(key string, n int) bool
}

func newHookServer(t *testing.T) *hookServer {
	h := &hookServer{calls: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			RunID  string `json:"runId"`
			Status string `json:"status"`
		}
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if key != f.RunID+"."+f.Status {
			http.Error(w, "bad idempotency key "+key, 400)
			return
		}
		h.mu.Lock()
		h.calls[key]++
		n := h.calls[key]
		h.inFlight++
		onCall := h.onCall
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.inFlight--
			h.mu.Unlock()
		}()
		if onCall != nil && !onCall(key, n) {
			<-r.Context().Done() // the deliverer died mid-call
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookServer) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[key]
}

func (h *hookServer) snapshot() (calls map[string]int, inFlight int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.calls), h.inFlight
}

func (e *env) parentWorker(t *testing.T, id, hook string, extra map[string]string) *proc {
	t.Helper()
	vars := map[string]string{
		"JETRUN_NATS_URL":           e.url,
		"JETRUN_WORKER_ID":          id,
		"JETRUN_HTTP_ADDR":          "",
		"JETRUN_FINISH_WEBHOOKS":    "hook=" + hook,
		"JETRUN_RECONCILE_INTERVAL": "500ms",
		"JETRUN_FINISH_TIMEOUT":     "2s",
		"JETRUN_FINISH_RETRY_DELAY": "100ms",
		"JETRUN_LOG_LEVEL":          "debug",
	}
	maps.Copy(vars, extra)
	p := start(t, "parent-worker", vars)
	p.waitLog("parent-worker ready", 60*time.Second)
	return p
}

func (e *env) detached(t *testing.T, id string, steps, stepMs int) {
	t.Helper()
	e.dispatchDemo(t, id, steps, stepMs, &events.Detached{OnFinish: "hook"})
}

// A parent-worker (the finish deliverer and reconciler) is killed with -9
// mid-flight and restarted seconds later: every finish still arrives.
// Duplicates are possible only for calls in flight at the kill.
func TestParentWorkerKilledMidFlightEveryFinishArrives(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newHookServer(t)
	e.childWorker(t, "child-f", nil)
	pw := e.parentWorker(t, "pw-1", hook.URL, nil)

	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("f%02d", i)
		e.detached(t, ids[i], 4+i%8, 250)
	}
	natstest.Eventually(t, 60*time.Second, func() bool { c, _ := hook.snapshot(); return len(c) >= 4 }, "no finish delivered")
	pw.kill()
	atKill, inFlight := hook.snapshot()
	// A finish claimed but not marked delivered when the deliverer died was
	// in a handler call (or just after it, before the mark): only those may
	// be delivered twice.
	inHandler := 0
	for _, id := range ids {
		if row, _, err := e.store.Get(context.Background(), id); err == nil {
			if f := row.Finishes[events.StatusCompleted]; f != nil && f.ClaimedBy != "" && row.Delivered[events.StatusCompleted].IsZero() {
				inHandler++
			}
		}
	}
	t.Logf("parent-worker killed with %d of %d finishes delivered, %d webhook calls in flight, %d deliveries between claim and mark",
		len(atKill), n, inFlight, inHandler)

	// The child fleet finishes the runs alone meanwhile.
	for _, id := range ids {
		jetruntest.WaitRow(t, e.store, id, 90*time.Second, jetruntest.Final)
	}
	e.parentWorker(t, "pw-2", hook.URL, nil)
	for _, id := range ids {
		jetruntest.WaitRow(t, e.store, id, 60*time.Second, jetruntest.Delivered)
	}
	calls, _ := hook.snapshot()
	dups := 0
	for _, id := range ids {
		c := calls[id+".completed"]
		if c == 0 {
			t.Errorf("%s: finish never arrived", id)
		}
		dups += max(c-1, 0)
	}
	t.Logf("every finish arrived; %d duplicate deliveries (%d deliveries were between claim and mark at the kill)", dups, inHandler)
	if dups > inHandler {
		t.Fatalf("%d duplicates, but only %d deliveries were under way at the kill", dups, inHandler)
	}
}

// Killed during a handler, after its side effect: the finish is delivered
// again (at least once).
func TestKilledDuringAHandlerIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newHookServer(t)
	e.childWorker(t, "child-h", nil)
	var pw *proc
	var pwMu sync.Mutex
	killed := make(chan struct{})
	hook.onCall = func(key string, n int) bool {
		if key != "side-effect.completed" || n > 1 {
			return true
		}
		// The side effect happened (the call is recorded); now the
		// deliverer dies before it can mark the finish delivered.
		pwMu.Lock()
		pw.kill()
		pwMu.Unlock()
		close(killed)
		return false
	}
	pwMu.Lock()
	pw = e.parentWorker(t, "pw-h1", hook.URL, nil)
	pwMu.Unlock()
	e.detached(t, "side-effect", 2, 50)
	select {
	case <-killed:
	case <-time.After(60 * time.Second):
		t.Fatal("the handler was never called")
	}
	e.parentWorker(t, "pw-h2", hook.URL, nil)
	row := jetruntest.WaitRow(t, e.store, "side-effect", 60*time.Second, jetruntest.Delivered)
	if got := hook.count("side-effect.completed"); got < 2 {
		t.Fatalf("webhook called %d times; the finish must be redelivered after the crash", got)
	}
	t.Logf("finish delivered %d times (at least once), ledger attempts %d", hook.count("side-effect.completed"),
		row.Finishes[events.StatusCompleted].Attempts)
}

// Two parent-workers against one server deliver each finish once; killing
// the one holding the reconciler lease hands the lease to the other.
func TestTwoParentWorkersDeliverOnceAndFailOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newHookServer(t)
	e.childWorker(t, "child-2", nil)
	procs := map[string]*proc{
		"pw-a": e.parentWorker(t, "pw-a", hook.URL, nil),
		"pw-b": e.parentWorker(t, "pw-b", hook.URL, nil),
	}
	const n = 20
	for i := range n {
		e.detached(t, fmt.Sprintf("two%02d", i), 2, 50)
	}
	for i := range n {
		jetruntest.WaitRow(t, e.store, fmt.Sprintf("two%02d", i), 60*time.Second, jetruntest.Delivered)
	}
	ctx := context.Background()
	var holder string
	natstest.Eventually(t, 10*time.Second, func() bool {
		holder, _, _ = reconcile.Leader(ctx, e.store)
		return holder != ""
	}, "no reconciler holds the lease")
	other := map[string]string{"pw-a": "pw-b", "pw-b": "pw-a"}[holder]
	procs[holder].kill()
	killed := time.Now()
	natstest.Eventually(t, 30*time.Second, func() bool {
		h, _, _ := reconcile.Leader(ctx, e.store)
		return h == other
	}, "%s never took the lease over from %s", other, holder)
	took := time.Since(killed)
	t.Logf("%s took the reconciler lease over %s after %s was killed (interval 500ms: %.1f intervals)",
		other, took.Round(10*time.Millisecond), holder, took.Seconds()/0.5)

	for i := range 5 {
		e.detached(t, fmt.Sprintf("after%d", i), 2, 50)
	}
	for i := range 5 {
		jetruntest.WaitRow(t, e.store, fmt.Sprintf("after%d", i), 60*time.Second, jetruntest.Delivered)
	}
	calls, _ := hook.snapshot()
	for key, c := range calls {
		if c != 1 {
			t.Errorf("%s delivered %d times, want exactly once", key, c)
		}
	}
	if len(calls) != n+5 {
		t.Fatalf("%d finishes delivered, want %d", len(calls), n+5)
	}
}
