package e2e_test

import (
	"syscall"
	"testing"
	"time"
)

// parent-worker reads JETRUN_* variables only: NATS_URL (the nats CLI's
// own variable, which the README tour has users export), LEASE and
// CONCURRENCY without the prefix change nothing, so it starts its embedded
// server (issue 23 item 16). Were they read, it would connect to a port
// nothing listens on, and refuse a 1 ms lease and a concurrency of 0.
func TestParentWorkerIgnoresUnprefixedSettings(t *testing.T) {
	t.Parallel()
	pw := start(t, "parent-worker", map[string]string{
		"NATS_URL": "nats://127.0.0.1:1", "LEASE": "1ms", "CONCURRENCY": "0",
		"JETRUN_EMBEDDED_PORT": "-1", "JETRUN_HTTP_ADDR": "", "JETRUN_CHILDREN": "demo",
	})
	pw.waitLog("parent-worker ready", 60*time.Second)
	pw.waitOut("(embedded, store", 10*time.Second) // else it did not start its embedded server
	pw.signal(syscall.SIGTERM)
	if err := pw.wait(60 * time.Second); err != nil {
		t.Fatalf("parent-worker exited with %v", err)
	}
}
