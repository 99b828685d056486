package jetruncli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/jetruncli"
	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// jetrun limits sets, lists and pauses provider limits; a limiter's
// grants show as the window's use and the tenants' shares; bad rates are
// usage errors that store nothing.
func TestLimitsCommand(t *testing.T) {
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Setenv("JETRUN_NATS_URL", ns.ClientURL())
	cli := func(want int, args ...string) (string, string) {
		t.Helper()
		var out, errw bytes.Buffer
		if code := jetruncli.Main(ctx, args, nil, &out, &errw); code != want {
			t.Fatalf("jetrun %v: exit %d, want %d: %s", args, code, want, errw.String())
		}
		return out.String(), errw.String()
	}
	if out, _ := cli(jetruncli.ExitOK, "limits"); !strings.Contains(out, "no limits") {
		t.Fatalf("jetrun limits with none:\n%s", out)
	}
	if _, errw := cli(jetruncli.ExitUsage, "limits", "set", "gpt", "requests=0,tokens=100"); !strings.Contains(errw, `requests="0"`) {
		t.Fatalf("a zero rate: %s", errw)
	}
	cli(jetruncli.ExitOK, "limits", "set", "gpt", "requests=100,tokens=10000,window=1h")

	st, err := limits.Open(ctx, js, wire.Namespace("jetrun"), 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := limits.New(limits.Config{Store: st, Worker: "w1", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(context.Background())
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		g, err := l.Reserve(ctx, "gpt", tenant, 50)
		if err != nil {
			t.Fatal(err)
		}
		g.Settle(40)
	}
	// What the limiter granted reaches the pool with its next write: the
	// first write after the window's grants, when the worker has none
	// waiting and gives its idle slice back (or renews, a third of a lease
	// later). Waiting on a reservation that cannot be granted forces one.
	if _, errw := cli(jetruncli.ExitUsage, "limits", "pause", "gpt", "0s"); !strings.Contains(errw, "want a duration") {
		t.Fatalf("a zero pause: %s", errw)
	}
	cli(jetruncli.ExitOK, "limits", "pause", "gpt", "1m")
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = l.Reserve(wctx, "gpt", "acme", 10) }()
	natstest.Eventually(t, 30*time.Second, func() bool {
		out, _ := cli(jetruncli.ExitOK, "limits")
		return strings.Contains(out, "4/100") && strings.Contains(out, "acme 75%, globex 25%") && strings.Contains(out, "until")
	}, "jetrun limits shows the window's 4 requests, the tenants' shares and the pause")
	wcancel()
	<-done
	out, _ := cli(jetruncli.ExitOK, "limits")
	t.Logf("jetrun limits:\n%s", out)
	var list struct{ Limits []limits.Status }
	o, _ := cli(jetruncli.ExitOK, "limits", "--json")
	if err := json.Unmarshal([]byte(o), &list); err != nil || len(list.Limits) != 1 || list.Limits[0].Pause.Count != 1 {
		t.Fatalf("jetrun limits --json: %v %s", err, o)
	}
}
