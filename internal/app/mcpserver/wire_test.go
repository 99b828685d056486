package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
)

// wireAnswer is an HTTP answer to a raw POST.
type wireAnswer struct {
	status int
	ctype  string
	body   []byte
}

// rpc decodes the answer as one JSON-RPC error response; ok is false when
// it is not one.
func (a wireAnswer) rpc() (id json.RawMessage, code int64, message string, ok bool) {
	var resp struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body := a.body
	if strings.HasPrefix(a.ctype, "text/event-stream") { // the first event's
		for msg := range sseData(strings.NewReader(string(a.body))) {
			body = msg
			break
		}
	} else if !strings.HasPrefix(a.ctype, "application/json") {
		return nil, 0, "", false
	}
	if json.Unmarshal(body, &resp) != nil ||
		resp.JSONRPC != "2.0" || resp.ID == nil || resp.Error == nil {
		return nil, 0, "", false
	}
	return resp.ID, resp.Error.Code, resp.Error.Message, true
}

// sessionless stands for the session of a request of protocol 2026-07-28,
// which has none.
const sessionless = "(sessionless)"

// postRaw POSTs body as is, in session (none when "").
func postRaw(t *testing.T, ctx context.Context, url, session, body string) wireAnswer {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+writeToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	switch session {
	case "":
	case sessionless:
		req.Header.Set("Mcp-Protocol-Version", mcpserver.SessionlessRevision)
	default:
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return wireAnswer{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: data}
}

// What a session's POST gets wrong is answered with a JSON-RPC error a
// client can parse: a body that is not JSON -32700, one that is no JSON-RPC
// message -32600 (HTTP 400, id null, as nothing can be answered; also
// without a session, in protocol 2026-07-28); a call of
// an unknown method -32601 for its id; a call the SDK refuses -32600 for
// its id; a tasks request without params -32602 (it crashed the
// process); a request without a session (but initialize) HTTP 400 with
// -32600 for its id. The session still serves afterwards.
func TestSessionWireErrorsAreJSONRPC(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openRawSession(t, ctx, f.url)
	for _, tc := range []struct {
		name, session, body string
		status              int
		id                  string
		code                int64
		says                string
	}{
		{"not JSON", c.id, `{"jsonrpc":"2.0","id":1,"method":`, http.StatusBadRequest, "null", -32700, "Parse error"},
		{"no JSON-RPC version", c.id, `{"id":2,"method":"ping"}`, http.StatusBadRequest, "null", -32600, "Invalid Request"},
		{"empty batch", c.id, `[]`, http.StatusBadRequest, "null", -32600, "Invalid Request"},
		{"unknown method", c.id, `{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}`, http.StatusOK, "3", -32601, `"no/such/method"`},
		{"unknown method, string id", c.id, `{"jsonrpc":"2.0","id":"x-4","method":"tasks/nope"}`, http.StatusOK, `"x-4"`, -32601, `"tasks/nope"`},
		{"unknown notification", c.id, `{"jsonrpc":"2.0","method":"notifications/nope"}`, http.StatusBadRequest, "null", -32601, `"notifications/nope"`},
		{"call without params", c.id, `{"jsonrpc":"2.0","id":5,"method":"tools/call"}`, http.StatusBadRequest, "5", -32600, "params"},
		{"tasks/get without params", c.id, `{"jsonrpc":"2.0","id":7,"method":"tasks/get"}`, http.StatusOK, "7", -32602, "taskId"},
		{"tasks/result without params", c.id, `{"jsonrpc":"2.0","id":8,"method":"tasks/result"}`, http.StatusOK, "8", -32602, "taskId"},
		{"sessionless, not JSON", sessionless, `{"jsonrpc":"2.0","id":1,"method":`, http.StatusBadRequest, "null", -32700, "Parse error"},
		{"sessionless, no JSON-RPC version", sessionless, `{"id":2,"method":"ping"}`, http.StatusBadRequest, "null", -32600, "Invalid Request"},
		{"no session", "", `{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{}}`, http.StatusBadRequest, "6", -32600, "Mcp-Session-Id"},
		{"no session, a notification", "", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, http.StatusBadRequest, "null", -32600, "Mcp-Session-Id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := postRaw(t, ctx, f.url, tc.session, tc.body)
			id, code, msg, ok := a.rpc()
			if a.status != tc.status || !ok || string(id) != tc.id || code != tc.code || !strings.Contains(msg, tc.says) {
				t.Errorf("HTTP %d %s %s; want HTTP %d, a JSON-RPC error %d for id %s saying %q", a.status, a.ctype, a.body, tc.status, tc.code, tc.id, tc.says)
			}
		})
	}
	if res := c.call(ctx, "tools/list", map[string]any{}); !strings.Contains(string(res), `"steps"`) {
		t.Fatalf("tools/list after the bad requests: %s", res)
	}
}

// Every method the server lists as known is one the SDK serves: sent
// without an id, a call method is refused for its missing id (not as an
// unknown method) and a notification is accepted.
func TestKnownMethodsAreServed(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openRawSession(t, ctx, f.url)
	for _, method := range mcpserver.KnownMethods() {
		a := postRaw(t, ctx, f.url, c.id, `{"jsonrpc":"2.0","method":"`+method+`","params":{}}`)
		if a.status == http.StatusAccepted {
			continue // a notification
		}
		if _, code, msg, ok := a.rpc(); !ok || code != -32600 || strings.Contains(msg, "unsupported") {
			t.Errorf("%s without an id: HTTP %d %s; want it refused for the missing id, as a method the SDK serves", method, a.status, a.body)
		}
	}
}

// A call the client cancels (notifications/cancelled) gets no response:
// its stream ends without one, and its run is cancelled.
func TestCancelledCallGetsNoResponse(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openRawSession(t, ctx, f.url)
	const key = "cancel-on-the-wire"
	answered := make(chan wireAnswer, 1)
	go func() {
		answered <- postRaw(t, ctx, f.url, c.id, `{"jsonrpc":"2.0","id":"call-7","method":"tools/call","params":`+
			`{"name":"block","arguments":{},"_meta":{"io.jetrun/idempotencyKey":"`+key+`"}}}`)
	}()
	id := parent.RunID("mcp", key)
	jetruntest.WaitRow(t, f.env.Store, id, 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	if a := postRaw(t, ctx, f.url, c.id, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"call-7","reason":"no longer needed"}}`); a.status != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: HTTP %d %s", a.status, a.body)
	}
	a := <-answered
	for msg := range sseData(strings.NewReader(string(a.body))) {
		if strings.Contains(string(msg), `"call-7"`) {
			t.Errorf("the cancelled call was answered: %s", msg)
		}
	}
	if row := jetruntest.WaitRow(t, f.env.Store, id, 30*time.Second, jetruntest.Final); row.Status != events.StatusAborted {
		t.Errorf("run ended %s; want aborted", row.Status)
	}
}

// Over stdio too, a cancelled call gets no response, while the session
// goes on answering.
func TestCancelledCallGetsNoResponseOverStdio(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := mcpserver.New(mcpserver.Config{Client: f.env.Client, Runs: kv.New(f.env.Runtime), Runtime: f.env.Runtime})
	s.Start(ctx)
	defer s.Stop()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- s.ServeStdio(ctx, inR, outW)
		_ = outW.Close()
	}()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var seen []string
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	await := func(id string) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the output ended before the response %s", id)
				}
				seen = append(seen, l)
				if strings.Contains(l, `"id":`+id+`,`) || strings.HasSuffix(l, `"id":`+id+`}`) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no response %s", id)
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	await("1")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	const key = "cancel-on-stdio"
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{},"_meta":{"io.jetrun/idempotencyKey":"` + key + `"}}}`)
	id := parent.RunID("mcp", key)
	jetruntest.WaitRow(t, f.env.Store, id, 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	if row := jetruntest.WaitRow(t, f.env.Store, id, 30*time.Second, jetruntest.Final); row.Status != events.StatusAborted {
		t.Errorf("run ended %s; want aborted", row.Status)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	await("3")
	_ = inW.Close()
	for l := range lines {
		seen = append(seen, l)
	}
	if err := <-served; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	for _, l := range seen {
		if strings.Contains(l, `"id":2,`) || strings.HasSuffix(l, `"id":2}`) {
			t.Errorf("the cancelled call was answered: %s", l)
		}
	}
}
