package e2e_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// stepworkerLease is the lease of the stepworker test binary.
const stepworkerLease = 2 * time.Second

// A Go worker holding a reservation is killed with -9: its hold stops
// counting within a lease of the kill (its expiry, renewed by the dead
// worker's heart, is at most one lease ahead), after which a reservation
// of the whole budget by another run of the tree fits; the run taken over
// reserves again and completes, and nothing stays held.
func TestKilledWorkersReservationReturnsWithinALease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	worker := func(id string) *proc {
		p := start(t, "stepworker", nil, e.url, id)
		p.waitLog("stepworker serving", 60*time.Second)
		return p
	}
	a := worker("rk-a")
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "one.hold")) // the worker holds its reservation inside step one
	const budget = 1000
	spend := events.UsageReport{InputTokens: 800}
	if _, err := e.client.Dispatch(context.Background(), parent.Request{AgentType: "stepper", RunID: "rk", Budget: &events.TreeBudget{Tokens: budget},
		Input: map[string]any{"dir": dir, "steps": []string{"one"}, "reserve": spend, "usage": spend}}); err != nil {
		t.Fatal(err)
	}
	waitCounter(t, filepath.Join(dir, "one"), 1) // reserved, inside the step
	held := jetruntest.WaitRow(t, e.store, "rk", 30*time.Second, func(r *model.Row) bool { return len(r.Holds) == 1 })
	a.kill()
	killed := time.Now()

	row, _, err := e.store.Get(context.Background(), "rk")
	if err != nil {
		t.Fatal(err)
	}
	if len(row.Holds) != 1 || row.Holds[0].ID != held.Holds[0].ID || row.Holds[0].Amount.Tokens() != spend.InputTokens {
		t.Fatalf("holds after the kill %+v; want the killed attempt's %+v", row.Holds, held.Holds)
	}
	dead := row.Holds[0]
	if ahead := dead.Until.Sub(killed); ahead > stepworkerLease {
		t.Fatalf("the killed worker's hold counts until %s after the kill; want at most a lease (%s)", ahead, stepworkerLease)
	}

	// Another run of the tree reserves the whole budget, as Run.Reserve
	// does: refused while the dead hold counts, taken once it expired.
	probe := model.Hold{ID: "rk-probe.1.1", Run: "rk-probe", Attempt: 1, Amount: events.UsageTotals{InputTokens: budget}}
	var refused int
	natstest.Eventually(t, 30*time.Second, func() bool {
		now := time.Now()
		probe.Until = now.Add(time.Minute)
		_, _, err := e.store.Mutate(context.Background(), "rk", func(r *model.Row) error {
			return model.Apply(r, model.Reserved{Hold: probe}, now)
		})
		var over *model.OverrunError
		if errors.As(err, &over) {
			if !now.Before(dead.Until) {
				t.Fatalf("refused at %s, after the dead hold expired (%s): %v", now, dead.Until, err)
			}
			refused++
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	}, "a reservation of the whole budget never fit after the kill")
	row, _, err = e.store.Get(context.Background(), "rk")
	if err != nil {
		t.Fatal(err)
	}
	if len(row.Holds) != 1 || row.Holds[0].ID != probe.ID {
		t.Fatalf("holds %+v; want only the probe's: the dead hold dropped", row.Holds)
	}
	if _, _, err := e.store.Mutate(context.Background(), "rk", func(r *model.Row) error {
		return model.Apply(r, model.HoldsReleased{Run: probe.Run, Attempt: probe.Attempt}, time.Now())
	}); err != nil {
		t.Fatal(err)
	}

	worker("rk-b")
	touch(t, filepath.Join(dir, "one.go"))
	row = jetruntest.WaitRow(t, e.store, "rk", 90*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("row: %s attempt %d (%s)", row.Status, row.Attempt, row.Error)
	}
	if row.TreeUsage == nil || row.TreeUsage.Tokens() != spend.InputTokens || len(row.Holds) != 0 {
		t.Fatalf("tree usage %+v, holds %+v; want the step's %d tokens once, none held", row.TreeUsage, row.Holds, spend.InputTokens)
	}
	t.Logf("dead hold counted %s past the kill (lease %s); %d probe reservations refused before it expired",
		dead.Until.Sub(killed).Round(time.Millisecond), stepworkerLease, refused)
}
