package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

// The repository's nats.conf runs a real nats-server (the binary, built from
// the pinned module) that the workers use as documented.
func TestNatsConfRunsARealServerTheWorkersUse(t *testing.T) {
	t.Parallel()
	conf, err := filepath.Abs("../../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats.conf does not parse: %v", err)
	}
	if !opts.JetStream || opts.Host != "127.0.0.1" || opts.StoreDir == "" || opts.JetStreamMaxStore == 0 {
		t.Fatalf("nats.conf: jetstream %v host %q store %q max store %d", opts.JetStream, opts.Host, opts.StoreDir, opts.JetStreamMaxStore)
	}

	// Run it as documented, from a scratch directory so ./data stays there;
	// only the port is overridden, to run beside other tests.
	port := natstest.FreePort(t)
	srv := start(t, "nats-server", nil, "-c", conf, "-p", fmt.Sprint(port))
	dir := srv.cmd.Dir
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	natstest.Eventually(t, 20*time.Second, func() bool {
		nc, err = nats.Connect(url, nats.UserInfo("parent", rolePasswords["parent"]))
		return err == nil
	}, "nats-server -c nats.conf did not come up")
	t.Cleanup(nc.Close)
	if anon, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		anon.Close()
		t.Fatal("nats.conf lets a client without a user in")
	}

	// The parent-worker creates the streams and the dispatch consumers of
	// the agent types the child-worker announces; the child-worker, as
	// child, finds them (it may not create them); a parent client with
	// the parent user runs a run on them.
	start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""})).
		waitLog("parent-worker ready", 60*time.Second)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	start(t, "child-worker", roleEnv(url, "child")).waitLog("child-worker serving", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := client.Run(ctx, parent.Request{AgentType: "demo", RunID: "conf", Input: map[string]int{"steps": 2, "stepMs": 10}})
	if err != nil || res.Summary != "finished 2 steps" {
		t.Fatalf("run on nats.conf server: %+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "nats", "jetstream")); err != nil {
		t.Fatalf("store dir from nats.conf not used: %v", err)
	}
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "conf", time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatal(row.Status)
	}
}
