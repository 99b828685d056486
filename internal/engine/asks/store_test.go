package asks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

// An answer is to the payload it saw: when a wait asks again with another
// payload (an attempt that took the run over shows a new diff), the ask's
// digest follows it, an answer naming the old digest is refused with the
// new one, and the answer records the digest it answered.
func TestAnAnswerToAChangedPayloadIsRefused(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st := engine.From(env.Runtime).Asks()
	ask := func(diff string) *events.Ask {
		t.Helper()
		a, err := st.Ensure(ctx, events.Ask{ID: asks.SignalID("d1", "approve", 0), RunID: "d1", TreeID: "d1", AgentType: "t",
			Kind: events.AskApprove, Via: events.AskViaSignal, Name: "approve", Payload: json.RawMessage(`{"diff":"` + diff + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	old := ask("+1 -1")
	cur := ask("+5 -0")
	if cur.Digest == old.Digest {
		t.Fatalf("the digest did not follow the payload: %s", cur.Digest)
	}
	_, err := st.Answer(ctx, old.ID, old.Digest, json.RawMessage(`{"approved":true}`), "alice")
	var conflict *asks.Conflict
	if !errors.As(err, &conflict) || !errors.Is(err, asks.ErrStale) || conflict.Ask.Digest != cur.Digest {
		t.Fatalf("an answer to the old payload: %v; want ErrStale naming %s", err, cur.Digest)
	}
	a, err := st.Answer(ctx, cur.ID, cur.Digest, json.RawMessage(`{"approved":true}`), "alice")
	if err != nil || a.Answer.Digest != cur.Digest || string(a.Payload) != `{"diff":"+5 -0"}` {
		t.Fatalf("an answer to the new payload: %+v, %v", a, err)
	}
	if again := ask("+9 -9"); again.Digest != cur.Digest || again.Status != events.AskAnswered {
		t.Fatalf("an answered ask changed its payload: %+v", again)
	}
}

// The first answer wins by compare-and-set: answerers racing on one ask
// get one success, and every other one ErrAnswered naming the winner.
func TestRacingAnswersHaveOneWinner(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st := engine.From(env.Runtime).Asks()
	a, err := st.Ensure(ctx, events.Ask{ID: asks.SignalID("race", "approve", 0), RunID: "race", TreeID: "race", AgentType: "t",
		Kind: events.AskApprove, Via: events.AskViaSignal, Name: "approve", Payload: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	type outcome struct {
		by  string
		err error
	}
	out := make(chan outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			by := fmt.Sprintf("answerer-%d", i)
			_, err := st.Answer(ctx, a.ID, a.Digest, json.RawMessage(`{"approved":true}`), by)
			out <- outcome{by, err}
		})
	}
	wg.Wait()
	close(out)
	var winners []string
	var losers []*asks.Conflict
	for o := range out {
		var c *asks.Conflict
		switch {
		case o.err == nil:
			winners = append(winners, o.by)
		case errors.As(o.err, &c) && errors.Is(o.err, asks.ErrAnswered):
			losers = append(losers, c)
		default:
			t.Fatalf("%s: %v", o.by, o.err)
		}
	}
	if len(winners) != 1 || len(losers) != n-1 {
		t.Fatalf("%d winners %v, %d refused; want one winner", len(winners), winners, len(losers))
	}
	for _, c := range losers {
		if c.Ask.Answer == nil || c.Ask.Answer.By != winners[0] {
			t.Fatalf("a refused answer names %+v; want %s", c.Ask.Answer, winners[0])
		}
	}
}
