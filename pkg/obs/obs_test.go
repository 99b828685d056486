package obs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/natstest"
	"github.com/jetrun/jetrun/pkg/obs"
)

func TestReportPublishesOnTheEventsSubject(t *testing.T) {
	nc, _ := natstest.Connect(t, natstest.RunServer(t))
	sub, err := nc.SubscribeSync("jetrun.obs.>")
	if err != nil {
		t.Fatal(err)
	}
	r := obs.New(nc, "", nil, "test")
	r.Report(context.Background(), obs.BudgetExceeded, "r1", "reason", "no-progress", "after", 2*time.Second)
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ev obs.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "jetrun.obs.budget.exceeded" || ev.Event != obs.BudgetExceeded || ev.RunID != "r1" || ev.Source != "test" ||
		ev.Attrs["reason"] != "no-progress" || ev.Attrs["after"] != "2s" {
		t.Fatalf("%s: %+v", msg.Subject, ev)
	}
	var none *obs.Reporter
	none.Report(context.Background(), obs.FinishFailed, "r2") // a nil reporter is a no-op
}
