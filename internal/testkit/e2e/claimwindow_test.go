package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

// A child-worker killed (kill -9) while a short run's handler runs inside
// its claim window leaves nothing stored of the attempt: no row (the run
// was published plainly), no status event. The server redelivers the
// dispatch one lease later and another worker runs the handler again,
// claimed at its start (a redelivery does not wait to claim): the run's
// timeline is running, completed, at attempt 1, since the lost attempt was
// never on the row.
func TestAWorkerKilledInsideTheClaimWindowLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var (
		mu       sync.Mutex
		requests int
	)
	first, stop := make(chan struct{}), make(chan struct{})
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		n := requests
		mu.Unlock()
		if n == 1 {
			close(first)
			// Its worker is killed while the handler waits here, emitting nothing.
			select {
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"result":{"summary":"second try"}}`)
	}))
	t.Cleanup(agent.Close)
	t.Cleanup(func() { close(stop) }) // before Close: a request may outlive its killed worker's connection
	// A lease of 6 s allows a window of 1 s: the kill lands well inside it.
	vars := map[string]string{"JETRUN_HTTP_AGENTS": "tool=" + agent.URL, "JETRUN_LEASE": "6s", "JETRUN_CLAIM_WINDOW": "1s"}

	a := e.childWorker(t, "child-a", vars)
	if _, err := e.js.Publish(context.Background(), "jetrun.dispatch.tool", []byte(`{"runId":"w1","input":{}}`)); err != nil {
		t.Fatal(err)
	}
	<-first
	a.kill()

	// Nothing of the attempt is stored.
	if _, _, err := e.store.Get(context.Background(), "w1"); !errors.Is(err, runstore.ErrRunNotFound) {
		t.Fatalf("row after kill -9 inside the claim window: %v, want none", err)
	}
	if evs := jetruntest.ReadEvents(t, e.js, "w1"); len(evs) != 0 {
		t.Fatalf("events after kill -9 inside the claim window: %d, want none", len(evs))
	}

	e.childWorker(t, "child-b", vars)
	row := jetruntest.WaitRow(t, e.store, "w1", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Summary != "second try" || row.Attempt != 1 || row.Handoffs != 0 {
		t.Fatalf("row: %s %q attempt %d handoffs %d", row.Status, row.Summary, row.Attempt, row.Handoffs)
	}
	evs := waitFinalEvent(t, e.js, "w1")
	if got := fmt.Sprint(jetruntest.Statuses(evs)); got != "[running completed]" {
		t.Fatalf("statuses %s, want [running completed]", got)
	}
	if st := evs[len(evs)-1].Status; st.Attempt != 1 || !st.StartedAt.Equal(row.StartedAt) {
		t.Fatalf("final status event %+v, want attempt 1 started at %v", st, row.StartedAt)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 2 {
		t.Fatalf("the agent was asked %d times, want 2 (the killed attempt and the redelivery)", requests)
	}
}
