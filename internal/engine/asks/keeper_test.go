package asks_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// seen waits until the view holds ask id in a state cond accepts.
func seen(t *testing.T, v *asks.View, id string, cond func(*events.Ask) bool) *events.Ask {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a, ok := v.Get(id); ok && cond(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view never held ask %s as wanted", id)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// The keeper delivers an answer its answerer left undelivered, once; answers
// an ask past its deadline with its default, once; closes the asks of runs
// that ended.
func TestKeeper(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st := engine.From(env.Runtime).Asks()
	v, err := asks.StartView(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)
	ended := map[string]bool{}
	k := asks.NewKeeper(st, v, asks.KeeperConfig{RunState: func(id string) (bool, bool) { return true, ended[id] }})

	past := time.Now().Add(-time.Second)
	mk := func(run string, deadline *time.Time) *events.Ask {
		a, err := st.Ensure(ctx, events.Ask{ID: asks.SignalID(run, "go", 0), RunID: run, TreeID: run, AgentType: "t",
			Kind: events.AskApprove, Via: events.AskViaSignal, Name: "go", Payload: json.RawMessage(`{"x":1}`),
			AskedAt: time.Now(), Deadline: deadline, Default: json.RawMessage(`{"approved":false}`)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	owed, late, gone := mk("owed", nil), mk("late", &past), mk("gone", nil)
	ended["gone"] = true
	if _, err := st.Answer(ctx, owed.ID, owed.Digest, json.RawMessage(`{"approved":true}`), "alice"); err != nil {
		t.Fatal(err)
	}
	seen(t, v, owed.ID, func(a *events.Ask) bool { return a.Status == events.AskAnswered })
	seen(t, v, late.ID, func(*events.Ask) bool { return true })
	seen(t, v, gone.ID, func(*events.Ask) bool { return true })
	for range 2 {
		k.Sweep(ctx, true)
		seen(t, v, owed.ID, func(a *events.Ask) bool { return a.Answer.DeliveredAt != nil })
		seen(t, v, late.ID, func(a *events.Ask) bool { return a.Answer != nil && a.Answer.DeliveredAt != nil })
	}
	signals := func(run string) (n uint64, last string) {
		s := env.Runtime
		stream := engine.From(s).SignalsStream()
		subject := "jetrun.signal." + run + ".go"
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := stream.GetLastMsgForSubject(ctx, subject); err == nil {
			last = string(m.Data)
		}
		return info.State.Subjects[subject], last
	}
	if n, last := signals("owed"); n != 1 || last != `{"approved":true}` {
		t.Fatalf("owed: %d signals, last %s; want the answer once", n, last)
	}
	if n, last := signals("late"); n != 1 || last != `{"approved":false}` {
		t.Fatalf("late: %d signals, last %s; want the default once", n, last)
	}
	if a, _, _ := st.Get(ctx, late.ID); a.Answer.By != "deadline" {
		t.Fatalf("late answered by %q; want deadline", a.Answer.By)
	}
	if a, _, _ := st.Get(ctx, gone.ID); a.Status != events.AskClosed || a.ClosedReason != "run ended" {
		t.Fatalf("ask of an ended run: %+v", a)
	}
	if n, _ := signals("gone"); n != 0 {
		t.Fatalf("ask of an ended run delivered %d signals", n)
	}
}

// The new-ask hook (a webhook) gets each open ask until it answers 2xx,
// then never again; the ask records when.
func TestKeeperNotifiesEachNewAskOnce(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st := engine.From(env.Runtime).Asks()
	v, err := asks.StartView(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)
	var (
		mu    sync.Mutex
		calls []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, r.Header.Get("Idempotency-Key"))
		if len(calls) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(hook.Close)
	k := asks.NewKeeper(st, v, asks.KeeperConfig{Notify: asks.Webhook(hook.URL, nil), NotifyRetry: time.Millisecond})
	a, err := st.Ensure(ctx, events.Ask{ID: asks.SignalID("n1", "go", 0), RunID: "n1", Kind: events.AskForm,
		Via: events.AskViaSignal, Name: "go", AskedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	seen(t, v, a.ID, func(*events.Ask) bool { return true })
	natstest.Eventually(t, 30*time.Second, func() bool {
		k.Sweep(ctx, false)
		got, ok := v.Get(a.ID)
		return ok && got.NotifiedAt != nil
	}, "the ask was never recorded notified")
	k.Sweep(ctx, false)
	k.Sweep(ctx, false)
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls[0] != "ask."+a.ID || calls[1] != calls[0] {
		t.Fatalf("hook calls %v; want a failed one and a delivered one, keyed ask.%s", calls, a.ID)
	}
}
