package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// listen posts a sessionless subscriptions/listen naming taskIds and
// returns the response's messages as they come.
func listen(t *testing.T, ctx context.Context, url string, caps map[string]any, taskIDs ...string) <-chan map[string]json.RawMessage {
	t.Helper()
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": mcpserver.SessionlessRevision,
		"io.modelcontextprotocol/clientInfo": map[string]string{"name": "raw", "version": "1"}}
	for k, v := range caps {
		meta[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
		"params": map[string]any{"_meta": meta, "notifications": map[string]any{"taskIds": taskIDs}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+writeToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", mcpserver.SessionlessRevision)
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan map[string]json.RawMessage, 64)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			line := strings.TrimSpace(strings.TrimPrefix(sc.Text(), "data:"))
			var m map[string]json.RawMessage
			if json.Unmarshal([]byte(line), &m) == nil {
				out <- m
			}
		}
	}()
	return out
}

// Protocol 2026-07-28: a subscriptions/listen naming tasks acknowledges the
// known ones, sends each one's state and new statuses as
// notifications/tasks, and ends with its result when they are terminal.
func TestListenToTasks(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := f.env.Client.Dispatch(ctx, parent.Request{AgentType: "steps", Input: json.RawMessage(`{"steps":2}`), Detached: &events.Detached{}})
	if err != nil {
		t.Fatal(err)
	}
	id := d.Run.ID

	// Without the extension declared: refused.
	for m := range listen(t, ctx, f.url, nil, id) {
		if !strings.Contains(string(m["error"]), "-32021") {
			t.Errorf("listen without the extension: %v; want -32021", m)
		}
	}

	msgs := listen(t, ctx, f.url, tasksCaps, id, "no-such-task")
	next := func() map[string]json.RawMessage {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("the listen ended early")
			}
			return m
		case <-ctx.Done():
			t.Fatal("nothing on the listen")
		}
		return nil
	}
	ack := next()
	if string(ack["method"]) != `"notifications/subscriptions/acknowledged"` || !strings.Contains(string(ack["params"]), `"taskIds":["`+id+`"]`) ||
		!strings.Contains(string(ack["params"]), `"io.modelcontextprotocol/subscriptionId":7`) {
		t.Fatalf("first message %v; want the acknowledgement of task %s alone", ack, id)
	}
	status := func(want string) json.RawMessage {
		t.Helper()
		for {
			m := next()
			if string(m["method"]) != `"notifications/tasks"` {
				t.Fatalf("message %v; want notifications/tasks", m)
			}
			var p struct{ TaskID, Status string }
			_ = json.Unmarshal(m["params"], &p)
			if p.TaskID != id {
				t.Fatalf("notification of task %s; want %s", p.TaskID, id)
			}
			if p.Status == want {
				return m["params"]
			}
		}
	}
	status(mcpserver.TaskInputRequired)
	if _, err := f.env.Client.Signal(ctx, id, "go", nil); err != nil {
		t.Fatal(err)
	}
	if done := status(mcpserver.TaskCompleted); !strings.Contains(string(done), `"structuredContent":{"done":2}`) {
		t.Errorf("completed notification %s; want the result", done)
	}
	if end := next(); string(end["id"]) != "7" || end["result"] == nil {
		t.Errorf("last message %v; want the listen's result", end)
	}
}
