package keys_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/keys"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open returns the engine of a fresh runtime (jetruntest.NewEnv) and its
// JetStream context.
func open(t *testing.T) (*engine.Runtime, jetstream.JetStream) {
	t.Helper()
	env := jetruntest.NewEnv(t)
	return engine.From(env.Runtime), env.JS
}

// Under strategy latest, runs a service published straight to the stream
// are ordered by their dispatch sequences, not by which worker submitted
// them first: an older message that arrives late is superseded by the
// newer one, whether that one waits in the queue or already holds the key.
func TestLatestOrdersPlainPublishesByDispatchSequence(t *testing.T) {
	t.Parallel()
	rt, _ := open(t)
	ctx := context.Background()
	submit := func(key, id string, seq uint64) *model.Row {
		t.Helper()
		d := events.Dispatch{RunID: id, Input: json.RawMessage(`{}`), ConcurrencyKey: key, Strategy: events.StrategyLatest}
		held := keys.Held{}
		if seq > 0 {
			held = keys.Held{RunID: id, Seq: seq}
		}
		row, err := keys.Submit(ctx, rt, model.NewRun("demo", d, 0, time.Now()), held)
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		return row
	}
	superseded := func(r *model.Row, by string) {
		t.Helper()
		if r.Status != events.StatusAborted || r.Reason != events.ReasonSuperseded || r.SupersededBy != by {
			t.Fatalf("%s: %s/%s by %q; want aborted, superseded by %s", r.ID, r.Status, r.Reason, r.SupersededBy, by)
		}
	}

	// The newer one waits in the queue.
	if h := submit("k1", "holder", 0); h.Status != events.StatusStarting {
		t.Fatalf("holder: %s, want starting (the key was free)", h.Status)
	}
	if r := submit("k1", "newer", 20); r.Status != events.StatusQueued {
		t.Fatalf("newer: %s, want queued behind the holder", r.Status)
	}
	superseded(submit("k1", "older", 10), "newer") // published before "newer", submitted after it
	if r, _, err := rt.Store().Get(ctx, "newer"); err != nil || r.Status != events.StatusQueued {
		t.Fatalf("newer after the late older one: %v, %v; want still queued", r, err)
	}
	if q, err := rt.Store().Keys().Queue(ctx, "k1"); err != nil || len(q) != 1 || q[0].ID != "newer" {
		t.Fatalf("queue of k1: %v, %v; want only newer", q, err)
	}

	// The newer one holds the key already.
	if r := submit("k2", "n2", 40); r.Status != events.StatusStarting {
		t.Fatalf("n2: %s, want starting (k2 was free)", r.Status)
	}
	superseded(submit("k2", "o2", 30), "n2")

	// Without dispatch sequences (parent clients), the queue order decides:
	// the later submit supersedes the earlier one, as before.
	if r := submit("k1", "c1", 0); r.Status != events.StatusQueued {
		t.Fatalf("c1: %s, want queued", r.Status)
	}
	for _, id := range []string{"newer", "c1"} {
		r, _, err := rt.Store().Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if id == "newer" {
			superseded(r, "c1")
		} else if r.Status != events.StatusQueued {
			t.Fatalf("c1: %s, want queued", r.Status)
		}
	}
}

// Under strategy merge, runs a service published straight to the stream
// merge oldest first by their dispatch sequences, not in the order workers
// happened to submit them (issue 23: a burst km0..km3 merged as [km1, km2,
// km0, km3]): the oldest carries the others.
func TestMergeOrdersPlainPublishesByDispatchSequence(t *testing.T) {
	t.Parallel()
	rt, _ := open(t)
	ctx := context.Background()
	submit := func(id string, seq uint64) *model.Row {
		t.Helper()
		d := events.Dispatch{RunID: id, Input: json.RawMessage(strconv.Quote(id)), ConcurrencyKey: "km", Strategy: events.StrategyMerge}
		row, err := keys.Submit(ctx, rt, model.NewRun("demo", d, 0, time.Now()), keys.Held{RunID: id, Seq: seq})
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		return row
	}
	if h := submit("holder", 1); h.Status != events.StatusStarting {
		t.Fatalf("holder: %s, want starting (the key was free)", h.Status)
	}
	// Published km0..km3, submitted by the workers in another order.
	for _, p := range []struct {
		id  string
		seq uint64
	}{{"km1", 12}, {"km2", 13}, {"km0", 11}, {"km3", 14}} {
		if r := submit(p.id, p.seq); r.Status != events.StatusQueued {
			t.Fatalf("%s: %s, want queued behind the holder", p.id, r.Status)
		}
	}
	if _, _, err := rt.Store().Mutate(ctx, "holder", model.Mutation(time.Now(), model.Ended{Status: events.StatusCompleted})); err != nil {
		t.Fatal(err)
	}
	if err := keys.Advance(ctx, rt, "km", keys.Held{}); err != nil {
		t.Fatal(err)
	}
	row, _, err := rt.Store().Get(ctx, "km0")
	if err != nil {
		t.Fatal(err)
	}
	var inputs []string
	if err := json.Unmarshal(row.Input, &inputs); err != nil {
		t.Fatalf("km0 input %s: %v", row.Input, err)
	}
	if row.Status != events.StatusStarting || !slices.Equal(inputs, []string{"km0", "km1", "km2", "km3"}) ||
		!slices.Equal(row.Merged, []string{"km1", "km2", "km3"}) {
		t.Fatalf("km0: %s, input %s, merged %v; want starting with [km0 km1 km2 km3], carrying km1..km3",
			row.Status, row.Input, row.Merged)
	}
	for _, id := range []string{"km1", "km2", "km3"} {
		r, _, err := rt.Store().Get(ctx, id)
		if err != nil || r.Status != events.StatusAborted || r.Reason != events.ReasonMerged || r.MergedInto != "km0" {
			t.Fatalf("%s: %+v, %v; want aborted, merged into km0", id, r, err)
		}
	}
}
