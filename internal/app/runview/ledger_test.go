package runview_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// The view vouches for the finishes a run's row recorded while it was not
// final, and for none that a rewrite of a final row it saw added: a handler
// given to a run that had none, a later ending, a delivery mark removed.
func TestVouchTrustsOnlyWhatTheRowRecordedBeforeItsEnd(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	v, err := runview.Start(ctx, env.Runtime, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)
	kv, err := env.JS.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	put := func(r *model.Row) {
		t.Helper()
		data, _ := json.Marshal(r)
		if _, err := kv.Put(ctx, r.ID, data); err != nil {
			t.Fatal(err)
		}
		// The bucket keeps one revision per key: a watch that lags skips
		// a revision overwritten before it read it (see Vouch).
		if err := v.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	completed := map[events.Status]*model.FinishState{events.StatusCompleted: {Slot: model.Slot{DueAt: time.Now()}}}
	owed := finish.Result{RunID: "det", Handler: "h", Status: events.StatusCompleted}

	det := &model.Row{ID: "det", AgentType: "demo", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	put(det)
	det.Status, det.Finishes = events.StatusCompleted, completed
	put(det)
	plain := &model.Row{ID: "plain", AgentType: "demo", Status: events.StatusCompleted}
	put(plain)
	if err := v.Vouch(ctx, owed); err != nil {
		t.Fatalf("the finish its transition recorded: %v", err)
	}
	det.Delivered = map[events.Status]time.Time{events.StatusCompleted: time.Now()}
	put(det)

	plain.Detached, plain.Finishes = &events.Detached{OnFinish: "h"}, completed
	put(plain)
	det.Delivered = nil
	put(det)
	for _, f := range []finish.Result{
		{RunID: "plain", Handler: "h", Status: events.StatusCompleted},
		owed, // its delivery mark removed
		{RunID: "det", Handler: "h", Status: events.StatusCompleted, Ending: 1},
		{RunID: "det", Handler: "other", Status: events.StatusCompleted},
		{RunID: "det", Handler: "h", Status: events.StatusError},
	} {
		if err := v.Vouch(ctx, f); !errors.Is(err, finish.ErrNotOwed) {
			t.Errorf("%+v: %v, want ErrNotOwed", f, err)
		}
	}
	if err := v.Vouch(ctx, finish.Result{RunID: "cleared", Handler: "h", Status: events.StatusCompleted}); err != nil {
		t.Errorf("a run the view does not know is left to the deliverer: %v", err)
	}
}

// A view whose watch does not follow the bucket (here: stopped) judges a
// finish with the row the bucket's leader has, as it takes the rows it
// finds when it starts: the finish of a run that ended since is vouched
// for, not refused or held back forever. A run it saw final stays sealed:
// a handler written onto its row afterwards is still refused.
func TestVouchWithAWatchThatDoesNotFollowReadsTheLeader(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	v, err := runview.Start(ctx, env.Runtime, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)
	kv, err := env.JS.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	put := func(r *model.Row) {
		t.Helper()
		data, _ := json.Marshal(r)
		if _, err := kv.Put(ctx, r.ID, data); err != nil {
			t.Fatal(err)
		}
	}
	det := &model.Row{ID: "det", AgentType: "demo", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	put(det)
	plain := &model.Row{ID: "plain", AgentType: "demo", Status: events.StatusCompleted}
	put(plain)
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	v.Stop()

	det.Status = events.StatusCompleted
	det.Finishes = map[events.Status]*model.FinishState{events.StatusCompleted: {Slot: model.Slot{DueAt: time.Now()}}}
	put(det)
	plain.Detached, plain.Finishes = &events.Detached{OnFinish: "h"}, det.Finishes
	put(plain)
	if err := v.Vouch(ctx, finish.Result{RunID: "det", Handler: "h", Status: events.StatusCompleted}); err != nil {
		t.Errorf("the finish its transition recorded, the view not following: %v", err)
	}
	if err := v.Vouch(ctx, finish.Result{RunID: "plain", Handler: "h", Status: events.StatusCompleted}); !errors.Is(err, finish.ErrNotOwed) {
		t.Errorf("a handler written onto a run the view saw final: %v, want ErrNotOwed", err)
	}
}

// A finish whose row the view saw marked delivered, judged with a row
// read before the mark (a second copy of the finish read the row while
// the first was being delivered, or a lagging server answered), is not
// called forged: the view knows a newer row than the one read, so it
// cannot tell yet and the deliverer asks again. With the newest row it is
// vouched for, and the deliverer drops it as delivered.
func TestVouchDoesNotCallAFinishForgedOnARowOlderThanTheView(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	v, err := runview.Start(ctx, env.Runtime, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)
	kv, err := env.JS.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	put := func(r *model.Row) uint64 {
		t.Helper()
		data, _ := json.Marshal(r)
		rev, err := kv.Put(ctx, r.ID, data)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	owed := finish.Result{RunID: "det", Handler: "h", Status: events.StatusCompleted}
	det := &model.Row{ID: "det", AgentType: "demo", Status: events.StatusRunning, Detached: &events.Detached{OnFinish: "h"}}
	put(det)
	det.Status = events.StatusCompleted
	det.Finishes = map[events.Status]*model.FinishState{events.StatusCompleted: {Slot: model.Slot{DueAt: time.Now()}}}
	before := put(det)
	stale := det.Clone().View()
	det.Delivered = map[events.Status]time.Time{events.StatusCompleted: time.Now()}
	put(det)
	if err := v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	v.SetLatest(func(context.Context, string) (*jetruntype.Run, uint64, error) { return stale, before, nil })
	if err := v.Vouch(ctx, owed); err == nil || errors.Is(err, finish.ErrNotOwed) {
		t.Fatalf("judged on a row older than the view: %v, want an error that is not ErrNotOwed", err)
	}
}
