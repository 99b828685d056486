package e2e_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// The shipped cluster configuration fsyncs every write before it is
// acknowledged, so a power loss of every node at once loses no
// acknowledged write; nats.conf keeps nats-server's default (every 2
// minutes), as docs/operations.md says.
func TestShippedConfsSayHowOftenTheyFsync(t *testing.T) {
	t.Parallel()
	for i := 1; i <= 3; i++ {
		conf, err := filepath.Abs(fmt.Sprintf("../../../nats-cluster/n%d.conf", i))
		if err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("n%d.conf does not parse: %v", i, err)
		}
		if !opts.SyncAlways {
			t.Errorf("nats-cluster/n%d.conf: sync_interval is not always (interval %s)", i, opts.SyncInterval)
		}
	}
	conf, err := filepath.Abs("../../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats.conf does not parse: %v", err)
	}
	if opts.SyncAlways {
		t.Error("nats.conf fsyncs every write: docs/operations.md says it keeps the default")
	}
}
