package finish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
)

// A final status is reached once, so its finish has one key: a row
// rewritten to owe a later ending of a delivered completed finish (and a
// status event saying so) gets no second call under <id>.completed.2; the
// row records the copy as given up. Config.Vouch refuses what it does not
// vouch for, the same way.
func TestAFinalStatusIsDeliveredUnderOneKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	vouched := map[string]bool{"once": true, "refused": false}
	nc, client, store := setup(t, finish.Config{Vouch: func(_ context.Context, f finish.Result) error {
		if !vouched[f.RunID] {
			return fmt.Errorf("%w: test", finish.ErrNotOwed)
		}
		return nil
	}}, map[string]finish.Handler{
		"h": finish.HandlerFunc(func(_ context.Context, _ *jetruntype.Run, res finish.Result) error {
			mu.Lock()
			defer mu.Unlock()
			keys = append(keys, finish.IdempotencyKey(res))
			return nil
		}),
	})
	detached(t, client, "once", "h")
	detached(t, client, "refused", "h")
	jetruntest.WaitRow(t, store, "once", 30*time.Second, jetruntest.Delivered)
	refusedRow := func() bool {
		r, _, err := store.Get(context.Background(), "refused")
		return err == nil && r.Finishes[events.StatusCompleted] != nil && !r.Finishes[events.StatusCompleted].FailedAt.IsZero()
	}
	natstest.Eventually(t, 30*time.Second, refusedRow, "the finish Vouch refused was not recorded as given up")

	// The forgery: a later ending of the delivered finish, announced.
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := store.Get(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	fs := r.Finishes[events.StatusCompleted]
	fs.Ending, fs.Resumed, fs.Attempts = 1, true, 0
	r.Delivered, r.Summary = nil, "forged"
	data, _ := json.Marshal(r)
	if _, err := kv.Put(ctx, "once", data); err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: "jetrun.run.once.status", Data: []byte(`{"runId":"once","status":"completed"}`), Header: nats.Header{}}
	m.Header.Set(events.HeaderFinishOwed, string(events.StatusCompleted))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		r, _, err := store.Get(ctx, "once")
		return err == nil && !r.Finishes[events.StatusCompleted].FailedAt.IsZero()
	}, "the forged later ending was not recorded as refused")
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 1 || keys[0] != "once.completed" {
		t.Fatalf("handler calls %v, want [once.completed]", keys)
	}
}
