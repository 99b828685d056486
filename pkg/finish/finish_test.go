package finish_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
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
	row := jetruntest.WaitRow(t, store, "flaky-run", 20*time.Second, func(r *model.Row) bool {
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

// A handler that keeps failing is called MaxAttempts times, no more: the
// last failure dead-letters the finish, the reason counting the attempts.
func TestAFailingHandlerIsDeadLetteredAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	var calls atomic.Int32
	nc, client, store := setup(t, finish.Config{RetryDelay: time.Millisecond, MaxAttempts: maxAttempts}, map[string]finish.Handler{
		"down": finish.HandlerFunc(func(ctx context.Context, run *jetruntype.Run, res finish.Result) error {
			calls.Add(1)
			return errors.New("service down")
		}),
	})
	detached(t, client, "down-run", "down")
	row := jetruntest.WaitRow(t, store, "down-run", 20*time.Second, func(r *model.Row) bool {
		f := r.Finishes[events.StatusCompleted]
		return f != nil && !f.FailedAt.IsZero()
	})
	want := "handler down failed 3 times; last error: service down"
	if f := row.Finishes[events.StatusCompleted]; f.Attempts != maxAttempts || f.LastError != want {
		t.Fatalf("ledger after the last attempt: attempts %d, last error %q; want %d, %q", f.Attempts, f.LastError, maxAttempts, want)
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
		m, err := s.GetLastMsgForSubject(ctx, "jetrun.dlq.finish.down")
		return err == nil && m.Header.Get(events.HeaderReason) == want
	}, "the finish was not dead-lettered after its last attempt")
	if n := calls.Load(); n != maxAttempts { // the dead-letter follows the last call
		t.Fatalf("handler called %d times, want %d", n, maxAttempts)
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
	row := jetruntest.WaitRow(t, store, "strict-run", 20*time.Second, func(r *model.Row) bool {
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
		jetruntest.WaitRow(t, store, "later-run", 20*time.Second, func(r *model.Row) bool {
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
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "hook-ok", 10*time.Second, func(r *model.Row) bool { return len(r.Delivered) == 1 })
	if row.Delivered[events.StatusCompleted].IsZero() {
		t.Fatal("not marked delivered")
	}
	failed := jetruntest.WaitRow(t, engine.From(rt).Store(), "hook-fails", 10*time.Second, func(r *model.Row) bool {
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

// The webhook maps its answer to the outcome the deliverer acts on: a 429
// or 503's Retry-After (seconds or an HTTP date, capped at MaxRetryAfter)
// is a RetryAfter delay, a 4xx no retry can fix is Cancel, and the rest
// are plain errors (the deliverer's backoff).
func TestWebhookAnswersMapToRetryAfterAndCancel(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	var retryAfter atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := retryAfter.Load().(string); v != "" {
			w.Header().Set("Retry-After", v)
		}
		http.Error(w, "answer body", int(status.Load()))
	}))
	t.Cleanup(srv.Close)
	hook := finish.Webhook(srv.URL, nil)
	res := finish.Result{RunID: "r1", Status: events.StatusCompleted}
	soon := time.Now().Add(30 * time.Minute).UTC().Truncate(time.Second) // an HTTP date has whole seconds
	for _, tc := range []struct {
		status     int
		retryAfter string
		wantDelay  time.Duration // for a RetryAfter; -1: a plain error; -2: Cancel
	}{
		{http.StatusServiceUnavailable, "6", 6 * time.Second},
		{http.StatusTooManyRequests, "120", 2 * time.Minute},
		{http.StatusServiceUnavailable, "99999999", finish.MaxRetryAfter},
		{http.StatusTooManyRequests, time.Now().Add(3 * time.Hour).UTC().Format(http.TimeFormat), finish.MaxRetryAfter},
		{http.StatusTooManyRequests, soon.Format(http.TimeFormat), 30 * time.Minute}, // checked below against the clock
		{http.StatusServiceUnavailable, "", 0},
		{http.StatusServiceUnavailable, "soon", 0},
		{http.StatusServiceUnavailable, "-5", 0},
		{http.StatusTooManyRequests, time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0},
		{http.StatusInternalServerError, "6", -1}, // Retry-After counts on 429 and 503 only
		{http.StatusBadGateway, "", -1},
		{http.StatusRequestTimeout, "", -1},
		{http.StatusConflict, "", -1},
		{http.StatusTooEarly, "", -1},
		{http.StatusBadRequest, "", -2},
		{http.StatusUnauthorized, "", -2},
		{http.StatusNotFound, "6", -2},
		{http.StatusGone, "", -2},
	} {
		status.Store(int32(tc.status))
		retryAfter.Store(tc.retryAfter)
		before := time.Now()
		err := hook.ServeFinish(context.Background(), nil, res)
		after := time.Now()
		var (
			retry     *jetruntype.RetryError
			cancelled *jetruntype.CancelError
		)
		isRetry, isCancel := errors.As(err, &retry), errors.As(err, &cancelled)
		switch {
		case err == nil || !strings.Contains(err.Error(), "answer body") || !strings.Contains(err.Error(), strconv.Itoa(tc.status)):
			t.Errorf("%d %q: error %v; want one naming the status and the answer", tc.status, tc.retryAfter, err)
		case tc.wantDelay == -1 && (isRetry || isCancel), tc.wantDelay == -2 && (!isCancel || isRetry),
			tc.wantDelay >= 0 && (!isRetry || isCancel):
			t.Errorf("%d %q: error %#v; want kind %v", tc.status, tc.retryAfter, err, tc.wantDelay)
		case tc.retryAfter == soon.Format(http.TimeFormat):
			// The date is soon - now, now being when the answer was read.
			if lo, hi := soon.Sub(after), soon.Sub(before); retry.Delay < lo || retry.Delay > hi {
				t.Errorf("%d %q: delay %s; want between %s and %s", tc.status, tc.retryAfter, retry.Delay, lo, hi)
			}
		case tc.wantDelay >= 0 && retry.Delay != tc.wantDelay:
			t.Errorf("%d %q: delay %s; want %s", tc.status, tc.retryAfter, retry.Delay, tc.wantDelay)
		}
	}
}

// A webhook's Retry-After decides when the deliverer tries again. With a
// backoff of an hour, a 503 asking for a second is tried again, no sooner
// than that second, and delivered at the second attempt; with a backoff of
// a millisecond, a 503 and a 429 asking for an hour are not tried again
// while another webhook's 500s are retried three times, and a 404 is
// dead-lettered at the first attempt with its status and answer while a
// 409 is retried.
func TestWebhookRetryAfterAndPermanentAnswers(t *testing.T) {
	t.Parallel()
	// arrivals records, per run, when each call arrived and what it was
	// answered; answer says what to answer the n-th call (from 1).
	type arrival struct {
		at         time.Time
		status     int
		retryAfter string
	}
	var mu sync.Mutex
	arrivals := map[string][]arrival{}
	hookServer := func(t *testing.T, answer func(runID string, n int) (int, string)) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body finish.Result
			_ = json.NewDecoder(r.Body).Decode(&body)
			mu.Lock()
			n := len(arrivals[body.RunID]) + 1
			status, ra := answer(body.RunID, n)
			arrivals[body.RunID] = append(arrivals[body.RunID], arrival{at: time.Now(), status: status, retryAfter: ra})
			mu.Unlock()
			if ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			if status != http.StatusOK {
				http.Error(w, "answer "+strconv.Itoa(status), status)
			}
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	calls := func(id string) []arrival {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(arrivals[id])
	}

	t.Run("short", func(t *testing.T) {
		t.Parallel()
		url := hookServer(t, func(_ string, n int) (int, string) {
			if n == 1 {
				return http.StatusServiceUnavailable, "1"
			}
			return http.StatusOK, ""
		})
		_, client, store := setup(t, finish.Config{RetryDelay: time.Hour}, map[string]finish.Handler{"busy": finish.Webhook(url, nil)})
		detached(t, client, "busy-short", "busy")
		row := jetruntest.WaitRow(t, store, "busy-short", 30*time.Second, jetruntest.Delivered)
		if f := row.Finishes[events.StatusCompleted]; f.Attempts != 2 {
			t.Fatalf("ledger %+v; want delivered at the second attempt", f)
		}
		got := calls("busy-short")
		if len(got) != 2 {
			t.Fatalf("webhook called %d times; want twice", len(got))
		}
		secs, _ := strconv.Atoi(got[0].retryAfter)
		if wait := got[1].at.Sub(got[0].at); wait < time.Duration(secs)*time.Second {
			t.Fatalf("second call %s after the first, which answered Retry-After: %s", wait, got[0].retryAfter)
		}
	})

	t.Run("long and permanent", func(t *testing.T) {
		t.Parallel()
		url := hookServer(t, func(id string, n int) (int, string) {
			switch {
			case id == "busy-long":
				return http.StatusServiceUnavailable, "3600"
			case id == "limited-long":
				return http.StatusTooManyRequests, time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
			case id == "gone" && n == 1:
				return http.StatusNotFound, ""
			case id == "conflict" && n == 1:
				return http.StatusConflict, ""
			case id == "plain" && n < 4:
				return http.StatusInternalServerError, ""
			}
			return http.StatusOK, ""
		})
		nc, client, store := setup(t, finish.Config{RetryDelay: time.Millisecond, MaxAttempts: 5},
			map[string]finish.Handler{"hook": finish.Webhook(url, nil)})
		for _, id := range []string{"busy-long", "limited-long", "gone"} {
			detached(t, client, id, "hook")
			jetruntest.WaitRow(t, store, id, 30*time.Second, func(r *model.Row) bool {
				f := r.Finishes[events.StatusCompleted]
				return f != nil && f.LastError != "" && f.ClaimedBy == ""
			})
		}
		for _, id := range []string{"plain", "conflict"} {
			detached(t, client, id, "hook")
		}
		if f := jetruntest.WaitRow(t, store, "plain", 30*time.Second, jetruntest.Delivered).Finishes[events.StatusCompleted]; f.Attempts != 4 {
			t.Fatalf("plain ledger %+v; want delivered at the fourth attempt", f)
		}
		if f := jetruntest.WaitRow(t, store, "conflict", 30*time.Second, jetruntest.Delivered).Finishes[events.StatusCompleted]; f.Attempts != 2 {
			t.Fatalf("409 ledger %+v; want retried, delivered at the second attempt", f)
		}
		for _, id := range []string{"busy-long", "limited-long"} {
			row, _, err := store.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if f, n := row.Finishes[events.StatusCompleted], len(calls(id)); f.Attempts != 1 || !f.FailedAt.IsZero() || n != 1 {
				t.Fatalf("%s: ledger %+v, webhook called %d times; want one attempt, waiting for its Retry-After", id, f, n)
			}
		}
		gone, _, err := store.Get(context.Background(), "gone")
		if err != nil {
			t.Fatal(err)
		}
		if f := gone.Finishes[events.StatusCompleted]; f.Attempts != 1 || f.FailedAt.IsZero() || !strings.Contains(f.LastError, "404") {
			t.Fatalf("404 ledger %+v; want given up at the first attempt, with the status", f)
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
			m, err := s.GetLastMsgForSubject(ctx, "jetrun.dlq.finish.hook")
			if err != nil {
				return false
			}
			reason := m.Header.Get(events.HeaderReason)
			return strings.Contains(reason, "failed permanently") && strings.Contains(reason, "404") &&
				strings.Contains(reason, "answer 404")
		}, "the 404 was not dead-lettered with its status and answer")
		if n := len(calls("gone")); n != 1 {
			t.Fatalf("the 404 webhook was called %d times; want once", n)
		}
	})
}
