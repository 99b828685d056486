package finish_test

import (
	"context"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"log"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// A detached run names a finish handler (Detached.OnFinish): nobody waits
// for it, and when it ends a Deliverer calls that handler with the outcome,
// at least once (deduplicate on finish.IdempotencyKey), retrying a failed
// handler with backoff.
func ExampleDeliverer_HandleFunc() {
	// A server for the example; your code connects to its own, with
	// nats.Connect(nats.DefaultURL) say.
	nc, stop := natstest.ExampleConn()
	defer stop()
	ctx := context.Background()

	type outcome struct {
		key     string
		status  events.Status
		summary string
	}
	audited := make(chan outcome, 1)
	// One runtime per process: it creates (or checks) jetrun's streams and
	// buckets, and every role shares it.
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	d, err := finish.New(rt, finish.Config{})
	if err != nil {
		log.Fatal(err)
	}
	d.HandleFunc("audit", func(ctx context.Context, run *jetruntype.Run, res finish.Result) error {
		select {
		case audited <- outcome{finish.IdempotencyKey(res), res.Status, res.Summary}:
		default: // a redelivery: already recorded
		}
		return nil
	})
	if err := d.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer d.Stop()

	w, err := worker.New(rt, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	w.HandleFunc("report", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		return worker.Result{Summary: "report written"}, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "report", RunID: "report-1", Input: map[string]string{"quarter": "Q3"},
		Detached: &events.Detached{OnFinish: "audit"}}); err != nil {
		log.Fatal(err)
	}
	o := <-audited
	fmt.Println(o.key, o.status, o.summary)
	// Output: report-1.completed completed report written
}
