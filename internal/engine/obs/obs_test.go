package obs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

func TestReportPublishesOnTheEventsSubject(t *testing.T) {
	nc, _ := natstest.Connect(t, natstest.RunServer(t))
	sub, err := nc.SubscribeSync("jetrun.obs.>")
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log := slog.New(obs.NewHandler(slog.NewTextHandler(&logged, nil), nc, "", "test")).With("component", "c1")
	obs.Report(context.Background(), log, obs.BudgetExceeded, "r1", "reason", "no-progress", "after", 2*time.Second)
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ev obs.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "jetrun.obs.budget.exceeded" || ev.Event != obs.BudgetExceeded || ev.RunID != "r1" || ev.Source != "test" ||
		ev.Attrs["reason"] != "no-progress" || ev.Attrs["after"] != "2s" || ev.Attrs["component"] != "c1" {
		t.Fatalf("%s: %+v", msg.Subject, ev)
	}
	if n := strings.Count(logged.String(), "event=budget.exceeded"); n != 1 {
		t.Fatalf("the event was logged %d times:\n%s", n, logged.String())
	}
	// A debug event is published although the log leaves debug out; a
	// record without an event attribute is logged, not published.
	obs.Debug(context.Background(), log, obs.RunStarted, "r2")
	log.Info("plain line")
	msg, err = sub.NextMsg(5 * time.Second)
	if err != nil || msg.Subject != "jetrun.obs.run.started" {
		t.Fatalf("debug event: %v %v", msg, err)
	}
	if strings.Contains(logged.String(), "run.started") || !strings.Contains(logged.String(), "plain line") {
		t.Fatalf("log:\n%s", logged.String())
	}
	if msg, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a plain log line was published: %s", msg.Data)
	}
	obs.Report(context.Background(), nil, obs.FinishFailed, "r3") // no logger: a no-op
}
