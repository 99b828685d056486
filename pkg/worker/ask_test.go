package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// waitAsk polls ask id until cond holds, failing the test after timeout.
func waitAsk(t *testing.T, st *asks.Store, id string, cond func(*events.Ask) bool) *events.Ask {
	t.Helper()
	return jetruntest.WaitAsk(t, st, id, 30*time.Second, cond)
}

func askStore(t *testing.T, b *bundle) *asks.Store {
	return engine.From(jetruntest.OpenRuntime(t, b.nc, jetrun.Config{})).Asks()
}

// A wait with an approve ask stores the ask (its id, kind, payload's
// digest, run and tree); an answer for another digest is refused with the
// current one, a value that breaks the kind names the field, the first
// answer wins and a second names who answered; the run resumes with the
// answer, and delivering it again stores no second signal.
func TestWaitIsAnAskTheFirstAnswerWins(t *testing.T) {
	t.Parallel()
	got := make(chan json.RawMessage, 2)
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"asker": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			v, err := run.Wait(ctx, "approve", worker.Ask{Kind: events.AskApprove, Title: "ship it?", Payload: map[string]any{"diff": "+1 -1"}})
			if err != nil {
				return worker.Result{}, err
			}
			got <- v
			return worker.Result{Summary: "done"}, nil
		}),
	})
	c, st := newClient(t, b), askStore(t, b)
	ctx := context.Background()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "asker", RunID: "a1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	id := asks.SignalID("a1", "approve", 0)
	a := waitAsk(t, st, id, func(a *events.Ask) bool { return a.Status == events.AskOpen })
	want, _ := asks.Digest(json.RawMessage(`{"diff":"+1 -1"}`))
	if a.Kind != events.AskApprove || a.RunID != "a1" || a.TreeID != "a1" || a.AgentType != "asker" || a.Digest != want ||
		a.Via != events.AskViaSignal || a.Title != "ship it?" || a.AskedAt.IsZero() {
		t.Fatalf("ask %+v; want an open approve ask of run a1 with digest %s", a, want)
	}

	_, err := st.Answer(ctx, id, "sha256:stale", json.RawMessage(`{"approved":true}`), "alice")
	var conflict *asks.Conflict
	if !errors.As(err, &conflict) || !errors.Is(err, asks.ErrStale) || conflict.Ask.Digest != want {
		t.Fatalf("answer with a stale digest: %v; want ErrStale naming %s", err, want)
	}
	_, err = st.Answer(ctx, id, want, json.RawMessage(`{"approved":"yes"}`), "alice")
	var bad *asks.ValueError
	if !errors.As(err, &bad) || bad.Field != "/approved" {
		t.Fatalf("answer with a string: %v; want a ValueError naming /approved", err)
	}
	answered, err := st.Answer(ctx, id, want, json.RawMessage(`{ "approved": true }`), "alice")
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Answer(ctx, id, want, json.RawMessage(`{"approved":false}`), "bob")
	if !errors.As(err, &conflict) || !errors.Is(err, asks.ErrAnswered) || conflict.Ask.Answer.By != "alice" {
		t.Fatalf("second answer: %v; want ErrAnswered naming alice", err)
	}
	if _, err := st.Deliver(ctx, answered); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if string(v) != `{"approved":true}` {
			t.Fatalf("the run got %s", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not resume")
	}
	jetruntest.WaitRow(t, b.store, "a1", 30*time.Second, jetruntest.Final)
	a = waitAsk(t, st, id, func(a *events.Ask) bool { return a.ClosedAt != nil })
	if a.Status != events.AskAnswered || a.Answer.By != "alice" || a.Answer.Digest != want || a.Answer.DeliveredAt == nil {
		t.Fatalf("ask after the run went on: %+v %+v", a, a.Answer)
	}
	answered.Answer.DeliveredAt = nil // as a deliverer that crashed before recording it would hold it
	if _, err := st.Deliver(ctx, answered); err != nil {
		t.Fatal(err)
	}
	info, err := b.js.Stream(ctx, "JETRUN_SIGNALS")
	if err != nil {
		t.Fatal(err)
	}
	si, err := info.Info(ctx, jetstream.WithSubjectFilter("jetrun.signal.a1.approve"))
	if err != nil {
		t.Fatal(err)
	}
	if n := si.State.Subjects["jetrun.signal.a1.approve"]; n != 1 {
		t.Fatalf("%d signals stored for the ask; want 1", n)
	}
}

// A signal sent to the run directly answers its ask (by "signal"); a
// cancelled run's ask is closed; a takeover's second wait finds the same
// ask.
func TestAskSettlesHoweverTheWaitEnds(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"asker": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			_, err := run.Wait(ctx, "go")
			return worker.Result{}, err
		}),
	})
	c, st := newClient(t, b), askStore(t, b)
	ctx := context.Background()
	for _, id := range []string{"direct", "cancelled"} {
		if _, err := c.Dispatch(ctx, parent.Request{AgentType: "asker", RunID: id, Input: 1}); err != nil {
			t.Fatal(err)
		}
		jetruntest.WaitRow(t, b.store, id, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "go" })
		a := waitAsk(t, st, asks.SignalID(id, "go", 0), func(a *events.Ask) bool { return true })
		if a.Kind != events.AskForm || string(a.Payload) != `{"signal":"go"}` {
			t.Fatalf("plain wait's ask: %+v; want a form showing the signal's name", a)
		}
	}
	if _, err := c.Signal(ctx, "direct", "go", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "cancelled", "no"); err != nil {
		t.Fatal(err)
	}
	a := waitAsk(t, st, asks.SignalID("direct", "go", 0), func(a *events.Ask) bool { return a.ClosedAt != nil })
	if a.Status != events.AskAnswered || a.Answer.By != "signal" || string(a.Answer.Value) != `{"n":1}` {
		t.Fatalf("ask answered by a direct signal: %+v", a)
	}
	a = waitAsk(t, st, asks.SignalID("cancelled", "go", 0), func(a *events.Ask) bool { return a.ClosedAt != nil })
	if a.Status != events.AskClosed || a.ClosedReason != "run cancelled" {
		t.Fatalf("ask of a cancelled run: %+v", a)
	}
}

// A call given an ask is an ask: answering it replies to the call, with
// who answered on the reply.
func TestCallAskIsAnsweredThroughTheAsk(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"caller": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			out, err := run.Call(ctx, "pick", map[string]any{"options": 2}, worker.Ask{Kind: events.AskChoose, Choices: []string{"a", "b"}})
			if err != nil {
				return worker.Result{}, err
			}
			return worker.Result{Summary: string(out)}, nil
		}),
	})
	c, st := newClient(t, b), askStore(t, b)
	ctx := context.Background()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "caller", RunID: "c1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	id := asks.CallID("c1", 1)
	a := waitAsk(t, st, id, func(a *events.Ask) bool { return a.Status == events.AskOpen })
	if a.Via != events.AskViaCall || a.CallSeq != 1 || string(a.Payload) != `{"options":2}` {
		t.Fatalf("call ask %+v", a)
	}
	if _, err := st.Answer(ctx, id, a.Digest, json.RawMessage(`{"choice":"c"}`), "carol"); !errors.Is(err, asks.ErrBadValue) {
		t.Fatalf("a choice not offered: %v; want ErrBadValue", err)
	}
	a, err := st.Answer(ctx, id, a.Digest, json.RawMessage(`{"choice":"b"}`), "carol")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Deliver(ctx, a); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, b.store, "c1", 30*time.Second, jetruntest.Final)
	if row.Summary != `{"choice":"b"}` {
		t.Fatalf("run %s summary %q", row.Status, row.Summary)
	}
	states, err := c.Calls(ctx, "c1")
	if err != nil || len(states) != 1 || states[0].Reply == nil || states[0].Reply.By != "carol" {
		t.Fatalf("calls %+v %v; want one reply by carol", states, err)
	}
}

// Parallel asks of one run do not collide: two calls made at once with
// the same name are two asks with their own ids and payloads, and each
// answer reaches the call it answers.
func TestParallelAsksOfOneRunHaveTheirOwnIDs(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, worker.Config{}, map[string]worker.Handler{
		"twice": worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				got  = map[string]json.RawMessage{}
				errs []error
			)
			for _, refund := range []string{"r-10", "r-20"} {
				wg.Go(func() {
					out, err := run.Call(ctx, "refund", map[string]string{"refund": refund}, worker.Ask{Kind: events.AskApprove})
					mu.Lock()
					defer mu.Unlock()
					got[refund], errs = out, append(errs, err)
				})
			}
			wg.Wait()
			return worker.Result{Output: got}, errors.Join(errs...)
		}),
	})
	c, st := newClient(t, b), askStore(t, b)
	ctx := context.Background()
	if _, err := c.Dispatch(ctx, parent.Request{AgentType: "twice", RunID: "p1", Input: 1}); err != nil {
		t.Fatal(err)
	}
	answers := map[string]string{`{"refund":"r-10"}`: `{"approved":true}`, `{"refund":"r-20"}`: `{"approved":false}`}
	for seq := int64(1); seq <= 2; seq++ {
		a := waitAsk(t, st, asks.CallID("p1", seq), func(a *events.Ask) bool { return a.Status == events.AskOpen })
		value, ok := answers[string(a.Payload)]
		if !ok {
			t.Fatalf("ask %s shows %s; want one refund each", a.ID, a.Payload)
		}
		delete(answers, string(a.Payload))
		answered, err := st.Answer(ctx, a.ID, a.Digest, json.RawMessage(value), "ops")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Deliver(ctx, answered); err != nil {
			t.Fatal(err)
		}
	}
	row := jetruntest.WaitRow(t, b.store, "p1", 30*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || string(row.Output) != `{"r-10":{"approved":true},"r-20":{"approved":false}}` {
		t.Fatalf("run %s output %s; want each refund its own answer", row.Status, row.Output)
	}
}
