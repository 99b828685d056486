package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A milestone notice the row owes whose copy is not in the finish stream
// (lost) is published again by a sweep, once: while that copy waits, later
// sweeps publish nothing.
func TestSweepRepublishesALostMilestoneNotice(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx := context.Background()
	client, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "nobody", RunID: "lost-notice", Input: map[string]int{},
		Detached: &events.Detached{OnFinish: "h", OnMilestones: []string{"plan"}}}); err != nil {
		t.Fatal(err)
	}
	m := events.Milestone{RunID: "lost-notice", Sequence: 1, Name: "plan", At: time.Now().Add(-time.Hour)}
	if _, _, err := engine.From(rt).Store().Mutate(ctx, "lost-notice", model.Mutation(m.At, model.NoticeOwed{Milestone: m})); err != nil {
		t.Fatal(err)
	}
	r, err := reconcile.New(engine.From(rt), reconcile.Config{Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	st, err := r.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Republished != 1 {
		t.Fatalf("first sweep republished %d, want the notice", st.Republished)
	}
	stream, err := js.Stream(ctx, "JETRUN_FINISH")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, "jetrun.finish.h")
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(jetstream.MsgIDHeader) != "lost-notice.milestone.plan" || msg.Header.Get(events.HeaderKind) != "milestone" ||
		!wire.IsMilestoneNotice(msg.Data) {
		t.Fatalf("republished notice: %v %s", msg.Header, msg.Data)
	}
	row, _, err := engine.From(rt).Store().Get(ctx, "lost-notice")
	if err != nil {
		t.Fatal(err)
	}
	if row.Notices["plan"].Seq != msg.Sequence || row.Settled() {
		t.Fatalf("ledger after the republish: %+v", row.Notices["plan"])
	}
	for range 3 {
		if st, err := r.Sweep(ctx); err != nil || st.Republished != 0 {
			t.Fatalf("a later sweep republished %d (%v) while the copy waits", st.Republished, err)
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("finish stream holds %d messages, want the one copy", info.State.Msgs)
	}
}
