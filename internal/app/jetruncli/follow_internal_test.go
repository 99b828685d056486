package jetruncli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// dispatch --wait returns as soon as the run ended and its timeline was
// shown to its end: the drain after the end only bounds a replay that does
// not reach the final status event. Before, every --wait waited it out (a
// 13 ms run returned after 2 s); here it is made longer than the test may
// take, so a wait that still sits it out fails.
func TestWaitReturnsOnceTheRunEndedAndItsTimelineWasShown(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	jetruntest.StartWorker(t, rt, worker.Config{}, func(w *worker.Worker) { w.Handle(demo.AgentType, demo.Handler()) })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range []string{"quick-1", "quick-2", "quick-3"} {
		var out bytes.Buffer
		c := &cli{client: client, out: &out, errw: &out, drain: time.Hour}
		if _, err := client.Dispatch(ctx, parent.Request{AgentType: demo.AgentType, RunID: id,
			Input: map[string]int{"steps": 2, "stepMs": 5}}); err != nil {
			t.Fatal(err)
		}
		code, err := c.follow(ctx, id)
		if err != nil || code != ExitOK {
			t.Fatalf("follow %s: exit %d, %v\n%s", id, code, err, out.String())
		}
		got := out.String()
		if last, done := strings.Index(got, "✓ step-2"), strings.Index(got, "✔ "+id+" completed"); last < 0 || done < last {
			t.Errorf("follow %s printed no full timeline and outcome:\n%s", id, got)
		}
	}
}
