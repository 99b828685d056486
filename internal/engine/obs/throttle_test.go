package obs_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetrun/jetrun/internal/engine/obs"
)

// TestThrottle writes one line per class per interval, the later ones
// with the count of what was suppressed.
func TestThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, nil))
		th := &obs.Throttle{Every: 10 * time.Second}
		ctx := context.Background()
		for range 2500 { // 100 tries a second for 25 s, in two classes
			th.Log(ctx, logger, slog.LevelWarn, "fetch/transient", "fetch")
			th.Log(ctx, logger, slog.LevelWarn, "fetch/missing", "fetch")
			time.Sleep(10 * time.Millisecond)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		// 25 s: a line at 0, 10 and 20 s per class.
		if len(lines) != 6 {
			t.Fatalf("%d lines, want 6:\n%s", len(lines), buf.String())
		}
		if !strings.Contains(lines[2], "suppressed=") {
			t.Fatalf("the second line of a class has no count: %s", lines[2])
		}
	})
}
