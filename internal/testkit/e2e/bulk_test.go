package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// A JavaScript producer publishes 2,000 dispatches the way docs/protocol.md
// says to dispatch many (async publishes, a window of acks in flight, then
// every ack): every run completes, and the same batch again stores nothing
// (each ack a duplicate) and starts nothing.
func TestJavaScriptBulkProducer(t *testing.T) {
	t.Parallel()
	const n = 2000
	e := newEnv(t)
	node := interpreter(t, "node")
	dir := examples(t, "js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "nats")); err != nil {
		t.Fatalf("the NATS JavaScript client is not installed (make deps runs npm ci in examples/js): %v", err)
	}
	e.childWorker(t, "js-bulk", nil)

	bulk := func() (done struct{ Count, Stored, Duplicates, Failed int }) {
		t.Helper()
		cmd := exec.Command(node, "bulk.mjs", "--nats", e.url, "--agent", "demo", "--count", fmt.Sprint(n),
			"--id-prefix", "jsb-", "--input", `{"steps":1,"stepMs":0}`, "--window", "500")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node bulk.mjs: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &done); err != nil || done.Count != n {
			t.Fatalf("bulk.mjs summary %+v (%v):\n%s", done, err, out)
		}
		return done
	}
	if done := bulk(); done.Stored != n || done.Failed != 0 {
		t.Fatalf("first batch: %+v", done)
	}
	completed := func() int {
		rows, err := e.client.List(context.Background(), events.StatusCompleted)
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	natstest.Eventually(t, 3*time.Minute, func() bool { return completed() == n }, "the bulk-published runs did not all complete")

	if done := bulk(); done.Stored != 0 || done.Duplicates != n || done.Failed != 0 {
		t.Fatalf("the same batch again: %+v", done)
	}
	rows, err := e.client.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Status != events.StatusCompleted || r.Attempt != 1 {
			t.Fatalf("run %s after the batch again: %s, attempt %d", r.ID, r.Status, r.Attempt)
		}
	}
	if len(rows) != n {
		t.Fatalf("%d rows, want %d", len(rows), n)
	}
}
