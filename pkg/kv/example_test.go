package kv_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A service that shows runs reads their rows: one by id, a filtered list,
// and a watch that yields the rows, then Loaded, then every change.
func ExampleRuns() {
	// A server for the example; a dashboard connects to its own, as the
	// viewer user, say.
	nc, stop := natstest.ExampleConn()
	defer stop()
	ctx := context.Background()
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// Someone dispatches a run no worker serves yet.
	client, err := parent.New(rt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: "report", RunID: "report-1", Input: "Q3"}); err != nil {
		log.Fatal(err)
	}

	runs := kv.New(rt)
	row, err := runs.Get(ctx, "report-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(row.ID, row.AgentType, row.Status)
	_, err = runs.Get(ctx, "guessed")
	fmt.Println(errors.Is(err, kv.ErrRunNotFound))
	waiting, err := runs.List(ctx, kv.ListOptions{Statuses: []events.Status{events.StatusStarting}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(waiting), "starting")

	for c, err := range runs.Watch(ctx, kv.WatchOptions{}) {
		if err != nil {
			log.Fatal(err)
		}
		if c.Loaded {
			_, _ = client.Cancel(ctx, "report-1", "not needed")
			continue
		}
		fmt.Println("watch:", c.ID, c.Run.Status)
		if c.Run.Final() {
			break
		}
	}
	// Output:
	// report-1 report starting
	// true
	// 1 starting
	// watch: report-1 starting
	// watch: report-1 aborted
}
