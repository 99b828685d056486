package finish_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
)

// hearing records the asks a hook heard, by idempotency key.
type hearing struct {
	mu    sync.Mutex
	heard []string
	fail  map[string]int // calls to fail, by ask id
	block string         // an ask whose call blocks until its context ends
}

func (h *hearing) ServeAsk(ctx context.Context, a *finish.Ask) error {
	h.mu.Lock()
	h.heard = append(h.heard, finish.AskIdempotencyKey(a))
	fail, block := h.fail[a.ID] > 0, h.block == a.ID
	if fail {
		h.fail[a.ID]--
	}
	h.mu.Unlock()
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	if fail {
		return errors.New("chat is down")
	}
	return nil
}

func (h *hearing) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.heard)
}

// waitHeard polls until h heard want (in any order, each as often).
func waitHeard(t *testing.T, h *hearing, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	natstest.Eventually(t, 30*time.Second, func() bool {
		got = h.keys()
		slices.Sort(got)
		return slices.Equal(got, want)
	}, "hook heard %v; want %v", &got, want)
}

// An AskNotifier hands each new ask to its handler once (a failed call
// tried again), records it by the hook's name so a restart under the name
// does not hand it again, while a hook of another name hears every ask;
// a call cut short by a stop is made again by the next notifier.
func TestAskNotifierHearsEachAskOnce(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st := engine.From(env.Runtime).Asks()
	ask := func(run string) string {
		a, err := st.Ensure(ctx, events.Ask{ID: asks.SignalID(run, "go", 0), RunID: run, Kind: events.AskApprove,
			Via: events.AskViaSignal, Name: "go", AskedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	start := func(name string, h *hearing) *finish.AskNotifier {
		t.Helper()
		n, err := finish.NewAskNotifier(env.Runtime, h, finish.AskConfig{Name: name, Retry: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Shutdown(ctx) })
		return n
	}
	if _, err := finish.NewAskNotifier(env.Runtime, &hearing{}, finish.AskConfig{}); err == nil {
		t.Fatal("a notifier without a name was made")
	}

	a1 := ask("n1")
	chat := &hearing{fail: map[string]int{a1: 1}}
	n := start("chat", chat)
	a2 := ask("n2")
	waitHeard(t, chat, "ask."+a1, "ask."+a1, "ask."+a2) // a1 failed once, then went through
	for _, id := range []string{a1, a2} {
		natstest.Eventually(t, 30*time.Second, func() bool {
			a, _, err := st.Get(ctx, id)
			return err == nil && !a.Notified["chat"].IsZero()
		}, "ask %s never recorded heard by chat", id)
	}
	_ = n.Shutdown(ctx)

	// Restarted under its name: nothing again. A new ask whose call is cut
	// short by a stop is heard again after.
	chat2 := &hearing{}
	a3 := ask("n3")
	chat2.block = a3
	n2 := start("chat", chat2)
	waitHeard(t, chat2, "ask."+a3)
	_ = n2.Shutdown(ctx)
	chat3 := &hearing{}
	start("chat", chat3)
	waitHeard(t, chat3, "ask."+a3)

	// Another name hears every ask; the webhook's record is not touched.
	pager := &hearing{}
	start("pager", pager)
	waitHeard(t, pager, "ask."+a1, "ask."+a2, "ask."+a3)
	if got := chat3.keys(); len(got) != 1 {
		t.Fatalf("the restarted hook heard %v; want ask.%s once", got, a3)
	}
	if a, _, _ := st.Get(ctx, a1); a.NotifiedAt != nil {
		t.Fatalf("a Go hook recorded the webhook's notifiedAt: %+v", a)
	}
}
