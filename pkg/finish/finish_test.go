package finish_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup starts a server, a demo worker, a deliverer with handlers, and a
// parent client.
func setup(t *testing.T, cfg finish.Config, handlers map[string]finish.Handler) (*nats.Conn, *parent.Client, *runstore.Store) {
	t.Helper()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	ctx := context.Background()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	d, err := finish.New(rt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range handlers {
		d.Handle(name, h)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) { w.Handle(demo.AgentType, demo.Handler()) })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return nc, client, engine.From(rt).Store()
}

func detached(t *testing.T, c *parent.Client, id, handler string) {
	t.Helper()
	if _, err := c.Dispatch(context.Background(), parent.Request{AgentType: "demo", RunID: id,
		Input: map[string]int{"steps": 1, "stepMs": 0}, Detached: &events.Detached{OnFinish: handler}}); err != nil {
		t.Fatal(err)
	}
}

func TestAFailingHandlerIsRetriedUntilItSucceeds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	keys := make(chan string, 10)
	_, client, store := setup(t, finish.Config{RetryDelay: 20 * time.Millisecond}, map[string]finish.Handler{
		"flaky": finish.HandlerFunc(func(ctx context.Context, run *jetruntype.Run, res finish.Result) error {
			keys <- finish.IdempotencyKey(res)
			if calls.Add(1) < 3 {
				return errors.New("not yet")
			}
			return nil
		}),
	})
	detached(t, client, "flaky-run", "flaky")
	row := jetruntest.WaitRow(t, store, "flaky-run", 20*time.Second, func(r *jetruntype.Run) bool {
		return !r.Delivered[events.StatusCompleted].IsZero()
	})
	f := row.Finishes[events.StatusCompleted]
	if f.Attempts != 3 || f.LastError != "" || f.ClaimedBy != "" {
		t.Fatalf("ledger after the third attempt: %+v", f)
	}
	for range 3 {
		if k := <-keys; k != "flaky-run.completed" {
			t.Fatalf("idempotency key %q", k)
		}
	}
}

// A handler that returns Cancel is not called again: the finish is
// dead-lettered at once with the handler's error as the reason.
func TestACancelledFinishIsDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	nc, client, store := setup(t, finish.Config{RetryDelay: 20 * time.Millisecond, MaxAttempts: 5}, map[string]finish.Handler{
		"strict": finish.HandlerFunc(func(ctx context.Context, run *jetruntype.Run, res finish.Result) error {
			calls.Add(1)
			return jetruntype.Cancel(errors.New("account closed"))
		}),
	})
	detached(t, client, "strict-run", "strict")
	row := jetruntest.WaitRow(t, store, "strict-run", 20*time.Second, func(r *jetruntype.Run) bool {
		f := r.Finishes[events.StatusCompleted]
		return f != nil && !f.FailedAt.IsZero()
	})
	if f := row.Finishes[events.StatusCompleted]; f.Attempts != 1 || !strings.Contains(f.LastError, "account closed") {
		t.Fatalf("ledger after a cancelled delivery: %+v", f)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	natstest.Eventually(t, 10*time.Second, func() bool {
		s, err := js.Stream(ctx, "JETRUN_DLQ")
		if err != nil {
			return false
		}
		m, err := s.GetLastMsgForSubject(ctx, "jetrun.dlq.finish.strict")
		return err == nil && strings.Contains(m.Header.Get(events.HeaderReason), "failed permanently: account closed")
	}, "the finish was not dead-lettered with the handler's error")
	if n := calls.Load(); n != 1 { // the ledger's one attempt, and the message is terminated
		t.Fatalf("handler called %d times", n)
	}
}

// RetryAfter's delay replaces the backoff before the next attempt. With a
// backoff of minutes, a handler asking for a millisecond is called again at
// once and its finish is delivered at the third attempt; with a backoff of
// milliseconds, one asking for an hour is not called again while another
// handler's plain errors are retried three times.
func TestRetryAfterSetsTheWaitBeforeTheNextAttempt(t *testing.T) {
	t.Parallel()
	t.Run("short", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		_, client, store := setup(t, finish.Config{RetryDelay: time.Hour}, map[string]finish.Handler{
			"soon": finish.HandlerFunc(func(context.Context, *jetruntype.Run, finish.Result) error {
				if calls.Add(1) < 3 {
					return jetruntype.RetryAfter(errors.New("busy"), time.Millisecond)
				}
				return nil
			}),
		})
		detached(t, client, "soon-run", "soon")
		row := jetruntest.WaitRow(t, store, "soon-run", 20*time.Second, jetruntest.Delivered)
		if f := row.Finishes[events.StatusCompleted]; f.Attempts != 3 {
			t.Fatalf("ledger: %+v; want delivered at the third attempt", f)
		}
	})
	t.Run("long", func(t *testing.T) {
		t.Parallel()
		var later, plain atomic.Int32
		_, client, store := setup(t, finish.Config{RetryDelay: time.Millisecond}, map[string]finish.Handler{
			"later": finish.HandlerFunc(func(context.Context, *jetruntype.Run, finish.Result) error {
				later.Add(1)
				return jetruntype.RetryAfter(errors.New("come back in an hour"), time.Hour)
			}),
			"plain": finish.HandlerFunc(func(context.Context, *jetruntype.Run, finish.Result) error {
				if plain.Add(1) < 4 {
					return errors.New("not yet")
				}
				return nil
			}),
		})
		detached(t, client, "later-run", "later")
		jetruntest.WaitRow(t, store, "later-run", 20*time.Second, func(r *jetruntype.Run) bool {
			f := r.Finishes[events.StatusCompleted]
			return f != nil && f.LastError == "come back in an hour" && f.ClaimedBy == ""
		})
		detached(t, client, "plain-run", "plain")
		row := jetruntest.WaitRow(t, store, "plain-run", 20*time.Second, jetruntest.Delivered)
		if f := row.Finishes[events.StatusCompleted]; f.Attempts != 4 {
			t.Fatalf("plain ledger: %+v; want delivered at the fourth attempt", f)
		}
		row, _, err := store.Get(context.Background(), "later-run")
		if err != nil {
			t.Fatal(err)
		}
		if f := row.Finishes[events.StatusCompleted]; f.Attempts != 1 || !f.FailedAt.IsZero() || later.Load() != 1 {
			t.Fatalf("later ledger: %+v, handler called %d times; want one attempt, not given up", f, later.Load())
		}
	})
}

func TestAMalformedFinishIsDeadLettered(t *testing.T) {
	t.Parallel()
	nc, _, _ := setup(t, finish.Config{}, map[string]finish.Handler{
		"h": finish.HandlerFunc(func(context.Context, *jetruntype.Run, finish.Result) error { return nil }),
	})
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "jetrun.finish.h", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		s, err := js.Stream(ctx, "JETRUN_DLQ")
		if err != nil {
			return false
		}
		m, err := s.GetLastMsgForSubject(ctx, "jetrun.dlq.finish.h")
		return err == nil && string(m.Data) == "garbage" && m.Header.Get(events.HeaderReason) != ""
	}, "the malformed finish was not dead-lettered")
}

func TestWebhookHandlerDeliversTheFinishAsJSON(t *testing.T) {
	t.Parallel()
	type call struct {
		key  string
		body finish.Result
	}
	calls := make(chan call, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body finish.Result
		_ = json.NewDecoder(r.Body).Decode(&body)
		calls <- call{key: r.Header.Get("Idempotency-Key"), body: body}
		if body.RunID == "hook-fails" {
			http.Error(w, "nope", http.StatusBadGateway)
		}
	}))
	t.Cleanup(srv.Close)
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	d, err := finish.New(rt, finish.Config{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	d.Handle("hook", finish.Webhook(srv.URL, nil))
	ctx := context.Background()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) { w.Handle(demo.AgentType, demo.Handler()) })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"hook-ok", "hook-fails"} {
		if _, err := client.Dispatch(ctx, parent.Request{AgentType: "demo", RunID: id,
			Input: map[string]int{"steps": 1, "stepMs": 0}, Detached: &events.Detached{OnFinish: "hook"}}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]call{}
	for range 2 {
		select {
		case c := <-calls:
			got[c.body.RunID] = c
		case <-time.After(20 * time.Second):
			t.Fatal("webhook not called")
		}
	}
	ok := got["hook-ok"]
	if ok.key != "hook-ok.completed" || ok.body.Status != events.StatusCompleted || ok.body.Summary != "finished 1 step" {
		t.Fatalf("webhook call %+v", ok)
	}
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "hook-ok", 10*time.Second, func(r *jetruntype.Run) bool { return len(r.Delivered) == 1 })
	if row.Delivered[events.StatusCompleted].IsZero() {
		t.Fatal("not marked delivered")
	}
	failed := jetruntest.WaitRow(t, engine.From(rt).Store(), "hook-fails", 10*time.Second, func(r *jetruntype.Run) bool {
		f := r.Finishes[events.StatusCompleted]
		return f != nil && !f.FailedAt.IsZero()
	})
	if le := failed.Finishes[events.StatusCompleted].LastError; le == "" {
		t.Fatal("no error recorded")
	}
}

// A finish consumer deleted while the deliverer runs is re-created with its
// settings, and the next finish is delivered.
func TestADeletedFinishConsumerIsRecreated(t *testing.T) {
	t.Parallel()
	delivered := make(chan string, 4)
	nc, client, _ := setup(t, finish.Config{}, map[string]finish.Handler{
		"h": finish.HandlerFunc(func(_ context.Context, _ *jetruntype.Run, res finish.Result) error {
			delivered <- res.RunID
			return nil
		}),
	})
	detached(t, client, "before-delete", "h")
	if id := <-delivered; id != "before-delete" {
		t.Fatalf("delivered %s", id)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := js.DeleteConsumer(ctx, "JETRUN_FINISH", wire.FinishConsumer("h")); err != nil {
		t.Fatal(err)
	}
	detached(t, client, "after-delete", "h")
	select {
	case id := <-delivered:
		if id != "after-delete" {
			t.Fatalf("delivered %s", id)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the finish after the consumer was deleted was never delivered")
	}
	if _, err := js.Consumer(ctx, "JETRUN_FINISH", wire.FinishConsumer("h")); err != nil {
		t.Fatalf("the consumer was not re-created: %v", err)
	}
}
