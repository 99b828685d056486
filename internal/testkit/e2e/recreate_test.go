package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

// An operator deletes the events stream and the runs bucket while a
// parent-worker and a child-worker run: the binaries re-create them with
// their settings, and a detached run dispatched afterwards by a plain NATS
// publish completes on its first attempt and its finish is delivered once.
func TestDeletedStreamAndBucketUnderRunningBinaries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newHookServer(t)
	e.parentWorker(t, "pw-del", hook.URL, nil)
	e.childWorker(t, "child-del", nil)
	e.detached(t, "before-del", 2, 10)
	jetruntest.WaitRow(t, e.store, "before-del", 60*time.Second, jetruntest.Delivered)

	ctx := context.Background()
	if err := e.js.DeleteStream(ctx, "JETRUN_EVENTS"); err != nil {
		t.Fatal(err)
	}
	if err := e.js.DeleteKeyValue(ctx, "jetrun_runs"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(ctx, "jetrun.dispatch.demo",
		[]byte(`{"runId":"after-del","input":{"steps":2,"stepMs":10},"detached":{"onFinish":"hook"}}`)); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "after-del", 90*time.Second, jetruntest.Delivered)
	if row.Status != events.StatusCompleted || row.Attempt-row.Handoffs != 1 {
		t.Fatalf("the run after the delete: status %s, attempt %d, handoffs %d, reason %q", row.Status, row.Attempt,
			row.Handoffs, row.Reason)
	}
	if n := hook.count("after-del.completed"); n != 1 {
		t.Fatalf("finish delivered %d times", n)
	}
	info, err := e.js.Stream(ctx, "JETRUN_EVENTS")
	if err != nil {
		t.Fatalf("the events stream was not re-created: %v", err)
	}
	if want := events.DefaultEventsMaxAge; info.CachedInfo().Config.MaxAge != want {
		t.Fatalf("re-created events stream keeps events %s, want the configured %s", info.CachedInfo().Config.MaxAge, want)
	}
}
