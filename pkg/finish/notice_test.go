package finish_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// heard records what a handler heard, in order.
type heard struct {
	mu   sync.Mutex
	keys []string
	seqs map[string]int
}

func (h *heard) add(key string, seq int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys = append(h.keys, key)
	if h.seqs == nil {
		h.seqs = map[string]int{}
	}
	h.seqs[key] = seq
}

func (h *heard) snapshot() ([]string, map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.keys), h.seqs
}

// setupMilestones starts a server, a worker whose agent "steps" reaches the
// milestones named in its input ({"names": [...]}), a deliverer configured
// by register, and a parent client.
func setupMilestones(t *testing.T, register func(d *finish.Deliverer)) (*parent.Client, *runstore.Store) {
	t.Helper()
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	ctx := context.Background()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	d, err := finish.New(rt, finish.Config{RetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	register(d)
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("steps", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var in struct{ Names []string }
			if err := json.Unmarshal(run.Input(), &in); err != nil {
				return worker.Result{}, err
			}
			for _, name := range in.Names {
				if _, err := run.Milestone(ctx, name, nil); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{Summary: "done"}, nil
		})
	})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return client, engine.From(rt).Store()
}

func dispatchSteps(t *testing.T, c *parent.Client, id string, names, listed []string) {
	t.Helper()
	if _, err := c.Dispatch(context.Background(), parent.Request{AgentType: "steps", RunID: id,
		Input: map[string]any{"names": names}, Detached: &events.Detached{OnFinish: "h", OnMilestones: listed}}); err != nil {
		t.Fatal(err)
	}
}

// The Go handler hears the first milestone of each listed name once, never
// an unlisted one nor a repeated name, with the idempotency key
// <runId>.milestone.<name>; the finish is delivered as before.
func TestMilestoneNoticesReachAGoHandlerOncePerName(t *testing.T) {
	t.Parallel()
	var h heard
	client, store := setupMilestones(t, func(d *finish.Deliverer) {
		// The milestone handler first: Handle then takes its place
		// for finishes.
		d.HandleMilestoneFunc("h", func(_ context.Context, run *jetruntype.Run, n finish.Notice) error {
			if n.Kind != events.KindMilestoneNotice || n.Handler != "h" || run.ID != n.RunID {
				return errors.New("bad notice")
			}
			h.add(finish.NoticeIdempotencyKey(n), n.Milestone.Sequence)
			return nil
		})
		d.HandleFunc("h", func(_ context.Context, _ *jetruntype.Run, res finish.Result) error {
			h.add(finish.IdempotencyKey(res), 0)
			return nil
		})
	})
	dispatchSteps(t, client, "ms1", []string{"plan", "draft", "plan", "unlisted", "review"}, []string{"plan", "review", "never"})
	row := jetruntest.WaitRow(t, store, "ms1", 20*time.Second, jetruntest.Settled)
	natstest.Eventually(t, 10*time.Second, func() bool { k, _ := h.snapshot(); return len(k) >= 3 }, "three deliveries")
	keys, seqs := h.snapshot()
	if keys[len(keys)-1] != "ms1.completed" {
		t.Fatalf("heard %v: the finish must come after the notices", keys)
	}
	slices.Sort(keys)
	if want := []string{"ms1.completed", "ms1.milestone.plan", "ms1.milestone.review"}; !slices.Equal(keys, want) {
		t.Fatalf("heard %v, want %v", keys, want)
	}
	if seqs["ms1.milestone.plan"] != 1 || seqs["ms1.milestone.review"] != 5 {
		t.Fatalf("milestone sequences heard: %v (want plan 1, review 5)", seqs)
	}
	if len(row.Notices) != 2 || row.Notices["plan"].Attempts != 1 || row.Notices["plan"].DeliveredAt.IsZero() {
		t.Fatalf("ledger: %+v", row.Notices)
	}
}

// A webhook hears notices with their own idempotency key and headers; a
// failing call is retried.
func TestMilestoneNoticesReachAWebhook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		calls[key]++
		n := calls[key]
		mu.Unlock()
		if r.Header.Get("Jetrun-Kind") == "milestone" {
			var notice events.MilestoneNotice
			if err := json.NewDecoder(r.Body).Decode(&notice); err != nil ||
				key != notice.RunID+".milestone."+notice.Milestone.Name || r.Header.Get("Jetrun-Milestone") != notice.Milestone.Name {
				http.Error(w, "bad notice", http.StatusBadRequest)
				return
			}
			if n == 1 {
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	client, store := setupMilestones(t, func(d *finish.Deliverer) { d.Handle("h", finish.Webhook(srv.URL, nil)) })
	dispatchSteps(t, client, "ms2", []string{"fetched", "fetched", "parsed"}, []string{"fetched", "parsed"})
	row := jetruntest.WaitRow(t, store, "ms2", 20*time.Second, jetruntest.Settled)
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"ms2.milestone.fetched": 2, "ms2.milestone.parsed": 2, "ms2.completed": 1}
	for k, n := range want {
		if calls[k] != n {
			t.Fatalf("calls %v, want %v", calls, want)
		}
	}
	if len(calls) != len(want) || row.Notices["fetched"].Attempts != 2 || row.Notices["fetched"].Milestone.Sequence != 1 {
		t.Fatalf("calls %v, ledger %+v", calls, row.Notices)
	}
}

// A milestone handler's Cancel gives the notice up at once; one asking
// RetryAfter a millisecond is called again, and the finish follows both.
func TestMilestoneHandlerOutcomes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{}
	client, store := setupMilestones(t, func(d *finish.Deliverer) {
		d.HandleMilestoneFunc("h", func(_ context.Context, _ *jetruntype.Run, n finish.Notice) error {
			mu.Lock()
			calls[n.Milestone.Name]++
			c := calls[n.Milestone.Name]
			mu.Unlock()
			switch {
			case n.Milestone.Name == "refused":
				return jetruntype.Cancel(errors.New("not wanted"))
			case c == 1:
				return jetruntype.RetryAfter(errors.New("busy"), time.Millisecond)
			}
			return nil
		})
		d.HandleFunc("h", func(context.Context, *jetruntype.Run, finish.Result) error { return nil })
	})
	dispatchSteps(t, client, "ms3", []string{"refused", "busy"}, []string{"refused", "busy"})
	row := jetruntest.WaitRow(t, store, "ms3", 20*time.Second, jetruntest.Settled)
	refused, busy := row.Notices["refused"], row.Notices["busy"]
	if refused.Attempts != 1 || refused.FailedAt.IsZero() || !refused.DeliveredAt.IsZero() {
		t.Errorf("refused: %+v; want given up after one attempt", refused)
	}
	if busy.Attempts != 2 || busy.DeliveredAt.IsZero() {
		t.Errorf("busy: %+v; want delivered at the second attempt", busy)
	}
	if row.Delivered[events.StatusCompleted].IsZero() {
		t.Errorf("the finish was not delivered: %+v", row.Finishes)
	}
}

// A dispatch whose onMilestones is not valid is refused.
func TestOnMilestonesAreValidated(t *testing.T) {
	t.Parallel()
	client, _ := setupMilestones(t, func(d *finish.Deliverer) {
		d.HandleFunc("h", func(context.Context, *jetruntype.Run, finish.Result) error { return nil })
	})
	for _, det := range []*events.Detached{
		{OnFinish: "h", OnMilestones: []string{"a.b"}},
		{OnFinish: "h", OnMilestones: []string{"a", "a"}},
		{OnMilestones: []string{"a"}},
		{OnFinish: "h", OnMilestones: []string{""}},
	} {
		_, err := client.Dispatch(context.Background(), parent.Request{AgentType: "steps", RunID: "bad",
			Input: map[string]any{"names": []string{}}, Detached: det})
		if !errors.Is(err, events.ErrBadDispatch) {
			t.Fatalf("dispatch with %+v: %v, want ErrBadDispatch", det, err)
		}
	}
}

// A deliverer starts after its milestone-notices consumer was deleted and
// restored: the restored consumer resumes where its predecessor had got to
// (deliver by start sequence), a setting the server refuses to change, so
// a deliverer that started later (a parent-worker restarted after the
// restore) failed to create it ("deliver policy can not be updated") and
// never started. It adopts the consumer as restored and goes on.
func TestADelivererStartsAfterItsNoticeConsumerWasRestored(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	var h heard
	deliverer := func() *finish.Deliverer {
		t.Helper()
		d, err := finish.New(rt, finish.Config{RetryDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		d.HandleMilestoneFunc("h", func(_ context.Context, _ *jetruntype.Run, n finish.Notice) error {
			h.add(finish.NoticeIdempotencyKey(n), n.Milestone.Sequence)
			return nil
		})
		d.HandleFunc("h", func(context.Context, *jetruntype.Run, finish.Result) error { return nil })
		if err := d.Start(ctx); err != nil {
			t.Fatalf("start a deliverer: %v", err)
		}
		t.Cleanup(func() { _ = d.Stop() })
		return d
	}
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) {
		w.HandleFunc("steps", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			_, err := run.Milestone(ctx, "plan", nil)
			return worker.Result{}, err
		})
	})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	noticed := func(id string) {
		t.Helper()
		dispatchSteps(t, client, id, nil, []string{"plan"})
		natstest.Eventually(t, 20*time.Second, func() bool { k, _ := h.snapshot(); return slices.Contains(k, id+".milestone.plan") },
			"%s: no notice", id)
	}
	first := deliverer()
	noticed("before")
	stream := engine.From(rt).Namespace().EventsStream()
	if err := js.DeleteConsumer(ctx, stream, wire.NoticeConsumer); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		c, err := js.Consumer(ctx, stream, wire.NoticeConsumer)
		return err == nil && c.CachedInfo().Config.DeliverPolicy == jetstream.DeliverByStartSequencePolicy
	}, "the deliverer did not restore its consumer from where it had got to")
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	deliverer()
	noticed("after")
}
