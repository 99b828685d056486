package e2e_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/fakeprovider"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A child-worker process whose Python exec children hold every slot of a
// provider limit (worker.Limit reservations, mid-call: the fake provider
// holds their calls) is killed with -9 while another child-worker's runs
// wait on the limit. The killed holder's lease in the pool ends at most
// one lease (JETRUN_LEASE, the limiter's lease too) after the kill; no
// call reaches the provider after the kill before that lease ended (the
// slots are not handed out twice); then the other worker's runs get every
// slot and the pool drops the dead holder. Nothing is lost: the killed
// worker's runs are taken over (attempt 2) and every run completes once,
// its calls served exactly once each. The provider counts a call in flight
// from its arrival until it is answered or its caller disconnects (the
// killed calls end when the kill closes their connections); it never saw
// more calls at once than the cap.
func TestKilledChildWorkersLimitSlotsReturnWithinALease(t *testing.T) {
	t.Parallel()
	const (
		limit   = "capped"
		slots   = 3
		perA    = 2 * slots // the killed worker's runs: slots of them mid-call, the rest waiting
		perB    = slots     // the other worker's, waiting on the limit at the kill
		calls   = 2
		lease   = 2 * time.Second // JETRUN_LEASE of the child-workers (childWorker)
		holderA = "lk-a"
		holderB = "lk-b"
	)
	e := newEnv(t)
	p := &fakeprovider.Provider{}
	p.Start()
	t.Cleanup(p.Close)
	p.Hold()
	t.Cleanup(p.Release) // the calls still held end before the server closes
	ctx := context.Background()
	st, err := limits.Open(ctx, e.js, wire.Namespace("jetrun"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, limits.Spec{Name: limit, Concurrent: slots}); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "app", "agents", "execagent", "testdata", "limitcaller.py"))
	if err != nil {
		t.Fatal(err)
	}
	agents := "pycaller=" + python3(t) + " " + script
	dispatch := func(id string) {
		if _, err := e.client.Dispatch(ctx, parent.Request{AgentType: "pycaller", RunID: id,
			Input: map[string]any{"url": p.URL(), "calls": calls, "estimate": 50, "limit": limit}}); err != nil {
			t.Fatal(err)
		}
	}
	holder := func(id string) (limits.Holder, bool) {
		s, err := st.Status(ctx, limit)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := s.Pool.Holders[id]
		return h, ok
	}

	a := e.childWorker(t, holderA, map[string]string{"JETRUN_EXEC_AGENTS": agents, "JETRUN_CONCURRENCY": fmt.Sprint(perA)})
	var ids []string
	for i := range perA {
		ids = append(ids, fmt.Sprintf("lk-a%d", i))
		dispatch(ids[i])
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		h, _ := holder(holderA)
		return p.InFlight() == slots && h.Concurrent == slots && h.Waiting == perA-slots
	}, "worker A never held every slot mid-call with the rest of its runs waiting")

	e.childWorker(t, holderB, map[string]string{"JETRUN_EXEC_AGENTS": agents})
	for i := range perB {
		ids = append(ids, fmt.Sprintf("lk-b%d", i))
		dispatch(ids[perA+i])
	}
	for _, id := range ids[perA:] {
		jetruntest.WaitRow(t, e.store, id, 60*time.Second, func(r *model.Row) bool {
			return r.Worker == holderB && r.WaitingFor == "limit:"+limit
		})
	}

	a.kill()
	killed := time.Now()
	dead, ok := holder(holderA)
	if !ok || dead.Concurrent != slots {
		t.Fatalf("after the kill the pool lists worker A as %+v (listed: %v); want it holding %d slots", dead, ok, slots)
	}
	deadUntil := time.UnixMilli(dead.UntilMs)
	if ahead := deadUntil.Sub(killed); ahead > lease {
		t.Fatalf("the killed worker's slots count until %s after the kill; want at most a lease (%s)", ahead, lease)
	}
	before := len(p.Calls())

	// The other worker's runs get every slot, and the pool drops the dead
	// holder: the next compare-and-set after its lease removes it.
	natstest.Eventually(t, 60*time.Second, func() bool {
		_, listed := holder(holderA)
		return p.InFlight() == slots && len(p.Calls()) == before+slots && !listed
	}, "the killed worker's slots never went to the other worker's runs")
	for _, c := range p.Calls()[before:] {
		if c.Arrived.Before(deadUntil) {
			t.Fatalf("run %s's call reached the provider %s before the killed worker's lease ended: its slots were handed out twice",
				c.Run, deadUntil.Sub(c.Arrived))
		}
	}
	first := p.Calls()[before].Arrived

	p.Release()
	for i, id := range ids {
		row := jetruntest.WaitRow(t, e.store, id, 120*time.Second, jetruntest.Final)
		attempt := 1
		if i < perA {
			attempt = 2 // taken over from the killed worker (worker B is the only one left)
		}
		if row.Status != events.StatusCompleted || row.Attempt != attempt {
			t.Errorf("run %s: %s at attempt %d (%s); want completed at attempt %d", id, row.Status, row.Attempt, row.Error, attempt)
		}
	}
	served, dropped := map[string]int{}, 0
	for _, c := range p.Calls() {
		switch c.Outcome {
		case fakeprovider.Served:
			served[c.Run]++
		case fakeprovider.Dropped:
			dropped++
		default:
			t.Errorf("run %s's call: %s", c.Run, c.Outcome)
		}
	}
	for _, id := range ids {
		if served[id] != calls {
			t.Errorf("run %s: the provider served %d calls; want %d", id, served[id], calls)
		}
	}
	if dropped != slots {
		t.Errorf("%d calls dropped by their caller; want the %d the killed worker had in flight", dropped, slots)
	}
	if peak := p.Peak(); peak > slots {
		t.Errorf("the provider saw %d calls at once; want at most the limit's %d", peak, slots)
	}
	t.Logf("killed holder's lease ended %s after the kill (lease %s); first call on its slots %s after that; peak %d of %d",
		deadUntil.Sub(killed).Round(time.Millisecond), lease, first.Sub(deadUntil).Round(time.Millisecond), p.Peak(), slots)
}
