package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// The new-ask hook (JETRUN_ASK_WEBHOOK; finish.NewAskNotifier is the same
// keeper in a Go program) survives a kill -9 of the parent-worker while it
// posts an ask: the restarted one posts it again, with the same
// Idempotency-Key, records it notified once taken, and posts it no more
// (a later ask, posted after it, is the fence).
func TestAskWebhookSurvivesKill9(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st, err := asks.Open(context.Background(), e.js, wire.Namespace(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		posts    = map[string][]string{} // ask id → the Idempotency-Key of each post
		taken    = map[string]int{}      // ask id → 2xx answers
		inFlight = make(chan struct{})
		release  = make(chan struct{})
		first    sync.Once
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Jetrun-Ask-Id")
		mu.Lock()
		posts[id] = append(posts[id], r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		held := false
		first.Do(func() { held = true })
		if held { // the first post hangs until its poster is killed
			close(inFlight)
			<-release
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		taken[id]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pwEnv := map[string]string{"JETRUN_NATS_URL": e.url, "JETRUN_HTTP_ADDR": addr, "JETRUN_ASK_WEBHOOK": hook.URL}
	pw := start(t, "parent-worker", pwEnv)
	pw.waitLog("parent-worker ready", 60*time.Second)
	e.childWorker(t, "w1", nil)
	api := &apiClient{t: t, base: "http://" + addr, http: &http.Client{Timeout: 30 * time.Second}}
	api.dispatch("hooked-a", nil, map[string]int{"steps": 1, "approveAt": 1})
	idA := asks.SignalID("hooked-a", "approve", 0)
	select {
	case <-inFlight:
	case <-time.After(60 * time.Second):
		t.Fatal("the hook never got the first ask")
	}
	pw.kill() // while it posts
	close(release)

	pw = start(t, "parent-worker", pwEnv)
	pw.waitLog("parent-worker ready", 60*time.Second)
	jetruntest.WaitAsk(t, st, idA, 60*time.Second, func(a *events.Ask) bool { return a.NotifiedAt != nil })
	api.dispatch("hooked-b", nil, map[string]int{"steps": 1, "approveAt": 1})
	idB := asks.SignalID("hooked-b", "approve", 0)
	jetruntest.WaitAsk(t, st, idB, 60*time.Second, func(a *events.Ask) bool { return a.NotifiedAt != nil })

	mu.Lock()
	defer mu.Unlock()
	key := "ask." + idA
	if len(posts[idA]) != 2 || posts[idA][0] != key || posts[idA][1] != key || taken[idA] != 1 {
		t.Fatalf("ask %s: posted with keys %v, taken %d times; want 2 posts (one cut by the kill) keyed %s, taken once", idA, posts[idA], taken[idA], key)
	}
	if len(posts[idB]) != 1 || taken[idB] != 1 {
		t.Fatalf("ask %s: posted %d times, taken %d; want once", idB, len(posts[idB]), taken[idB])
	}
}
