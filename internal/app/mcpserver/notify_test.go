package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
)

// rawSession is a 2025-11-25 session spoken by hand, so the test sees the
// notifications the Go SDK's client does not know.
type rawSession struct {
	t   *testing.T
	url string
	id  string
	seq int
}

func (c *rawSession) do(ctx context.Context, method string, msg any) *http.Response {
	c.t.Helper()
	var body io.Reader
	if msg != nil {
		data, _ := json.Marshal(msg)
		body = bytes.NewReader(data)
	}
	req, _ := http.NewRequestWithContext(ctx, method, c.url, body)
	req.Header.Set("Authorization", "Bearer "+writeToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.id != "" {
		req.Header.Set("Mcp-Session-Id", c.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, c.url, err)
	}
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("%s %s: %s: %s", method, c.url, resp.Status, data)
	}
	return resp
}

// call sends a request and returns the result of its response.
func (c *rawSession) call(ctx context.Context, method string, params any) json.RawMessage {
	c.t.Helper()
	res, rerr := c.callErr(ctx, method, params)
	if rerr != nil {
		c.t.Fatalf("%s: %s", method, rerr)
	}
	return res
}

// callErr sends a request and returns the result or the error of its
// response.
func (c *rawSession) callErr(ctx context.Context, method string, params any) (json.RawMessage, json.RawMessage) {
	c.t.Helper()
	c.seq++
	seq := c.seq
	resp := c.do(ctx, http.MethodPost, map[string]any{"jsonrpc": "2.0", "id": c.seq, "method": method, "params": params})
	defer resp.Body.Close()
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		c.id = s
	}
	for msg := range sseData(resp.Body) {
		var r struct {
			ID     *int
			Result json.RawMessage
			Error  json.RawMessage
		}
		if json.Unmarshal(msg, &r) == nil && r.ID != nil && *r.ID == seq {
			return r.Result, r.Error
		}
	}
	c.t.Fatalf("%s: no response", method)
	return nil, nil
}

// sseData yields the data of each event of an SSE body, or the body itself
// when it is JSON.
func sseData(r io.Reader) func(func(json.RawMessage) bool) {
	return func(yield func(json.RawMessage) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			if data, ok := strings.CutPrefix(line, "data:"); ok {
				if !yield(json.RawMessage(strings.TrimSpace(data))) {
					return
				}
			} else if strings.HasPrefix(line, "{") && !yield(json.RawMessage(line)) {
				return
			}
		}
	}
}

func openRawSession(t *testing.T, ctx context.Context, url string) *rawSession {
	c := &rawSession{t: t, url: url}
	c.call(ctx, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]string{"name": "raw", "version": "1"}})
	c.do(ctx, http.MethodPost, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}).Body.Close()
	return c
}

// listen opens the session's standalone stream and returns its
// notifications of method.
func (c *rawSession) listen(ctx context.Context, method string) <-chan json.RawMessage {
	resp := c.do(ctx, http.MethodGet, nil)
	out := make(chan json.RawMessage, 64)
	go func() {
		defer resp.Body.Close()
		for msg := range sseData(resp.Body) {
			var n struct {
				Method string
				Params json.RawMessage
			}
			if json.Unmarshal(msg, &n) == nil && n.Method == method {
				select {
				case out <- n.Params:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

var tasksCaps = map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{
	"extensions": map[string]any{mcpserver.TasksExtension: map[string]any{}}}}

// A session that started a task is told each new status of it on its
// stream: input_required while the run waits for its signal, then completed
// with the result.
func TestTaskStatusNotifications(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openRawSession(t, ctx, f.url)
	notes := c.listen(ctx, mcpserver.NotificationTaskStatus)
	var task struct{ TaskID, Status string }
	raw := c.call(ctx, "tools/call", map[string]any{"name": "steps", "arguments": map[string]int{"steps": 2}, "_meta": tasksCaps})
	if err := json.Unmarshal(raw, &task); err != nil || task.TaskID == "" {
		t.Fatalf("tools/call as a task: %s (%v)", raw, err)
	}
	next := func(want string) map[string]json.RawMessage {
		t.Helper()
		for {
			select {
			case p := <-notes:
				var n map[string]json.RawMessage
				_ = json.Unmarshal(p, &n)
				var id, status string
				_ = json.Unmarshal(n["taskId"], &id)
				_ = json.Unmarshal(n["status"], &status)
				if id != task.TaskID {
					t.Fatalf("notification of task %s; want %s: %s", id, task.TaskID, p)
				}
				if status == want {
					return n
				}
			case <-ctx.Done():
				t.Fatalf("no %s notification of task %s", want, task.TaskID)
			}
		}
	}
	waiting := next(mcpserver.TaskInputRequired)
	if !strings.Contains(string(waiting["inputRequests"]), `"signal:go:0"`) {
		t.Errorf("input_required notification's inputRequests %s; want signal:go:0", waiting["inputRequests"])
	}
	if _, err := f.env.Client.Signal(ctx, task.TaskID, "go", nil); err != nil {
		t.Fatal(err)
	}
	done := next(mcpserver.TaskCompleted)
	if !strings.Contains(string(done["result"]), `"structuredContent":{"done":2}`) {
		t.Errorf("completed notification's result %s; want the output", done["result"])
	}
}
