package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// A final row rewritten to another final status, or to a live one, comes
// back to the run's first final status event, whatever was published on
// the status subject after it (junk, a forged final event); a row that
// holds its real ending is left alone.
func TestRepairFinalRestoresTheFirstFinalEvent(t *testing.T) {
	t.Parallel()
	rt, js := open(t)
	ctx := context.Background()
	r := &model.Row{ID: "rep", AgentType: "demo", Status: events.StatusRunning, Attempt: 2, CreatedAt: time.Now()}
	if _, err := rt.Store().Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := model.Apply(r, model.Ended{Status: events.StatusCompleted}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := rt.Announce(ctx, r, ""); err != nil {
		t.Fatal(err)
	}
	forged, _ := json.Marshal(events.StatusEvent{RunID: "rep", Status: events.StatusError, Reason: "forged", Attempt: 9})
	for _, data := range [][]byte{[]byte(`{}`), []byte(`not json`), forged} {
		if _, err := js.Publish(ctx, "jetrun.run.rep.status", data); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name         string
		status       events.Status
		reason       string
		wantRepaired bool
	}{
		{"final to final", events.StatusError, "forged", true},
		{"final to live", events.StatusRunning, "", true},
		{"real ending", events.StatusCompleted, "", false},
	} {
		row, _, err := rt.Store().Get(ctx, "rep")
		if err != nil {
			t.Fatal(err)
		}
		row.Status, row.Reason, row.Attempt = tc.status, tc.reason, 7
		if tc.status == events.StatusCompleted {
			row.Attempt = 2
		}
		data, _ := json.Marshal(row)
		kv, err := js.KeyValue(ctx, "jetrun_runs")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "rep", data); err != nil {
			t.Fatal(err)
		}
		ev, repaired, err := rt.RepairFinal(ctx, "rep")
		if err != nil || repaired != tc.wantRepaired {
			t.Fatalf("%s: repaired %v, %v; want %v", tc.name, repaired, err, tc.wantRepaired)
		}
		got, _, _ := rt.Store().Get(ctx, "rep")
		if got.Status != events.StatusCompleted || got.Reason != "" || got.Attempt != 2 {
			t.Fatalf("%s: row %s %q attempt %d after the repair (event %+v)", tc.name, got.Status, got.Reason, got.Attempt, ev)
		}
	}
}
