package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/worker"
)

// sseChunks returns the chunk sequence numbers and data of the chunk
// events of an event stream, in order.
func sseChunks(t *testing.T, evs []sseEvent) (seqs []int64, ids []string) {
	t.Helper()
	for _, e := range evs {
		if e.event != "chunk" {
			continue
		}
		var ev struct {
			Data struct {
				Seq  int64  `json:"seq"`
				Data string `json:"data"`
				More []any  `json:"more"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatalf("chunk event %s: %v", e.data, err)
		}
		if ev.Data.Data != fmt.Sprintf("c%d", ev.Data.Seq) || ev.Data.More != nil {
			t.Fatalf("chunk event %s is not one chunk", e.data)
		}
		seqs, ids = append(seqs, ev.Data.Seq), append(ids, e.id)
	}
	return seqs, ids
}

func oneToN(seqs []int64, from, n int64) bool {
	if int64(len(seqs)) != n-from+1 {
		return false
	}
	for i, s := range seqs {
		if s != from+int64(i) {
			return false
		}
	}
	return true
}

// A run's coalesced chunks reach an SSE client one event per chunk, each
// once, in order; a client that reconnects with the id of a chunk in the
// middle of a coalesced event gets exactly the chunks after it.
func TestEventStreamSplitsCoalescedChunks(t *testing.T) {
	t.Parallel()
	const n = 500
	b := setupServing(t, nil, func(w *worker.Worker) {
		w.Handle("stream", worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			for i := 1; i <= n; i++ {
				if err := run.Chunk(ctx, fmt.Sprintf("c%d", i)); err != nil {
					return worker.Result{}, err
				}
			}
			return worker.Result{}, nil
		}))
	})
	var created struct{ Code, Message string }
	wantStatus(t, do(t, "POST", b.url+"/v1/runs", `{"agentType":"stream","runId":"cs","input":{}}`, &created), 201)
	all := readSSE(t, b.url+"/v1/runs/cs/events", "", nil) // follows until the run ends
	seqs, ids := sseChunks(t, all)
	if !oneToN(seqs, 1, n) {
		t.Fatalf("chunks %v", seqs)
	}
	mid := -1
	for i, id := range ids {
		if strings.Contains(id, ".") {
			mid = i
			break
		}
	}
	if mid < 0 {
		t.Fatalf("no chunk was coalesced (ids %v)", ids)
	}
	rest, _ := sseChunks(t, readSSE(t, b.url+"/v1/runs/cs/events", ids[mid], nil))
	if !oneToN(rest, int64(mid+2), n) {
		t.Fatalf("resumed after %s (chunk %d): %v", ids[mid], mid+1, rest)
	}
	jetruntest.WaitRow(t, b.store, "cs", 10*time.Second, jetruntest.Final)
}
