package mcpserver_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

const (
	writeToken = "mcp-write-token"
	readToken  = "mcp-read-token"
)

// stepsSchema is the input schema of the "steps" agent.
const stepsSchema = `{"type":"object","properties":{"steps":{"type":"integer","minimum":1}},"required":["steps"],"additionalProperties":false}`

// fixture is a parent API and a worker on an embedded JetStream server, and
// the MCP server mounted on the HTTP API behind tokens.
type fixture struct {
	env   *jetruntest.Env
	url   string // the /mcp endpoint
	calls atomic.Int64
}

// newFixture serves three agent types: "steps" (progress 1/2, then waits
// for the signal "go"), "fail" (ends "error") and "block" (runs until
// cancelled).
func newFixture(t *testing.T) *fixture { return newFixtureWith(t, mcpserver.Config{}) }

// newFixtureWith is newFixture with the MCP server configured by cfg.
func newFixtureWith(t *testing.T, cfg mcpserver.Config) *fixture {
	f := &fixture{env: jetruntest.NewEnv(t)}
	f.env.StartWorker(t, worker.Config{ID: "w1"}, func(w *worker.Worker) {
		w.HandleWith("steps", worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			f.calls.Add(1)
			if err := run.Progress(ctx, worker.Progress{Fraction: 0.5, Message: "half way"}); err != nil {
				return worker.Result{}, err
			}
			if err := run.Flush(ctx); err != nil {
				return worker.Result{}, err
			}
			if _, err := run.Wait(ctx, "go"); err != nil {
				return worker.Result{}, err
			}
			var in struct{ Steps int }
			_ = json.Unmarshal(run.Input(), &in)
			return worker.Result{Summary: "did the steps", Output: map[string]int{"done": in.Steps}}, nil
		}), worker.AgentInfo{Description: "Take steps.", InputSchema: json.RawMessage(stepsSchema),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"done":{"type":"integer"}}}`)})
		w.HandleWith("fail", worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			return worker.Result{}, errors.New("boom")
		}), worker.AgentInfo{Description: "Fail."})
		w.HandleWith("block", worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			<-ctx.Done()
			return worker.Result{}, context.Cause(ctx)
		}), worker.AgentInfo{Description: "Block until cancelled."})
	})
	f.url = f.serve(t, cfg)
	return f
}

// serve mounts another MCP server configured by cfg (a parent-worker
// replica) on the fixture's JetStream and returns its endpoint.
func (f *fixture) serve(t *testing.T, cfg mcpserver.Config) string {
	cfg.Client, cfg.Runs, cfg.Runtime = f.env.Client, kv.New(f.env.Runtime), f.env.Runtime
	cfg.SyncEvery = cmp.Or(cfg.SyncEvery, 50*time.Millisecond)
	s := mcpserver.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	t.Cleanup(func() { cancel(); s.Stop() })
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Client: f.env.Client, MCP: s.Handler(),
		Tokens: map[string]httpapi.Role{writeToken: httpapi.RoleWrite, readToken: httpapi.RoleRead}}))
	t.Cleanup(srv.Close)
	return srv.URL + httpapi.MCPPath
}

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// revisions are the protocol revisions the tests speak: the sessionless
// one (the Go SDK's default) and the newest with sessions.
var revisions = []string{mcpserver.SessionlessRevision, "2025-11-25"}

// eachRevision runs test once per revision.
func eachRevision(t *testing.T, test func(t *testing.T, rev string)) {
	for _, rev := range revisions {
		t.Run(rev, func(t *testing.T) { test(t, rev) })
	}
}

// connect opens an MCP session of revision rev with the Go SDK's client.
func connect(t *testing.T, url, token, rev string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "jetrun-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: rev})
	if err == nil && cs.InitializeResult().ProtocolVersion != rev {
		_ = cs.Close()
		t.Fatalf("negotiated %s; want %s", cs.InitializeResult().ProtocolVersion, rev)
	}
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func mustConnect(t *testing.T, url, rev string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := connect(t, url, writeToken, rev, opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cs
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestMCPNeedsAWriteToken(t *testing.T) {
	f := newFixture(t)
	for _, rev := range revisions {
		for _, token := range []string{"", "wrong", readToken} {
			if _, err := connect(t, f.url, token, rev, nil); err == nil {
				t.Errorf("%s, token %q: connected; want refused", rev, token)
			}
		}
		mustConnect(t, f.url, rev, nil)
	}
}

func TestToolsListFollowsTheRegistry(t *testing.T) {
	eachRevision(t, func(t *testing.T, rev string) {
		f := newFixture(t)
		changed := make(chan struct{}, 16)
		cs := mustConnect(t, f.url, rev, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			changed <- struct{}{}
		}})
		ctx := testContext(t)
		names := func() map[string]*mcp.Tool {
			res, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			out := map[string]*mcp.Tool{}
			for _, tl := range res.Tools {
				out[tl.Name] = tl
			}
			return out
		}
		tools := names()
		steps, ok := tools["steps"]
		if !ok || tools["fail"] == nil || tools["block"] == nil || len(tools) != 3 {
			t.Fatalf("tools/list = %v; want steps, fail, block", tools)
		}
		if steps.Description != "Take steps." {
			t.Errorf("description = %q", steps.Description)
		}
		if in, _ := json.Marshal(steps.InputSchema); !strings.Contains(string(in), `"minimum":1`) {
			t.Errorf("input schema = %s; want the agent's", in)
		}
		if out, _ := json.Marshal(steps.OutputSchema); !strings.Contains(string(out), `"done"`) {
			t.Errorf("output schema = %s; want the agent's", out)
		}

		// A worker with a new agent type: the session is told, and lists it.
		w2 := f.env.StartWorker(t, worker.Config{ID: "w2"}, func(w *worker.Worker) {
			w.HandleWith("extra", worker.HandlerFunc(func(ctx context.Context, run *worker.Run) (worker.Result, error) {
				return worker.Result{}, nil
			}), worker.AgentInfo{Description: "Extra."})
		})
		waitChanged(t, changed)
		if _, ok := names()["extra"]; !ok {
			t.Fatal("tools/list after list_changed lacks the new agent type")
		}
		// It goes: told again, and gone from the list.
		drain(changed)
		if err := w2.Stop(); err != nil {
			t.Fatal(err)
		}
		waitChanged(t, changed)
		natstest.Eventually(t, 30*time.Second, func() bool { _, ok := names()["extra"]; return !ok },
			"tools/list still lists the agent type of a stopped worker")
	})
}

func waitChanged(t *testing.T, changed <-chan struct{}) {
	t.Helper()
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no notifications/tools/list_changed")
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func TestCallAwaitsWithProgressAndReattaches(t *testing.T) {
	eachRevision(t, func(t *testing.T, rev string) {
		f := newFixture(t)
		progress := make(chan *mcp.ProgressNotificationParams, 16)
		cs := mustConnect(t, f.url, rev, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress <- r.Params
		}})
		ctx := testContext(t)
		const key = "conversation-1/call-7"
		id := parent.RunID("mcp", key)
		params := &mcp.CallToolParams{Name: "steps", Arguments: map[string]any{"steps": 3},
			Meta: mcp.Meta{mcpserver.MetaIdempotencyKey: key}}
		params.SetProgressToken("tok-1")
		type answer struct {
			res *mcp.CallToolResult
			err error
		}
		done := make(chan answer, 1)
		go func() {
			res, err := cs.CallTool(ctx, params)
			done <- answer{res, err}
		}()
		select {
		case p := <-progress:
			if p.ProgressToken != "tok-1" || p.Progress != 0.5 || p.Total != 1 || p.Message != "half way" {
				t.Errorf("progress = %+v; want tok-1, 0.5 of 1, half way", p)
			}
		case a := <-done:
			t.Fatalf("call answered before any progress: %+v %v", a.res, a.err)
		case <-ctx.Done():
			t.Fatal("no progress notification")
		}
		if _, err := f.env.Client.Signal(ctx, id, "go", nil); err != nil {
			t.Fatalf("signal the run the call started (%s): %v", id, err)
		}
		a := <-done
		if a.err != nil {
			t.Fatalf("tools/call: %v", a.err)
		}
		checkCompleted(t, a.res, id)

		// The same key again, from another session: the stored outcome, no
		// second run.
		cs2 := mustConnect(t, f.url, rev, nil)
		res, err := cs2.CallTool(ctx, &mcp.CallToolParams{Name: "steps", Arguments: map[string]any{"steps": 3},
			Meta: mcp.Meta{mcpserver.MetaIdempotencyKey: key}})
		if err != nil {
			t.Fatalf("tools/call again: %v", err)
		}
		checkCompleted(t, res, id)
		if n := f.calls.Load(); n != 1 {
			t.Errorf("the handler ran %d times; want once", n)
		}
	})
}

func checkCompleted(t *testing.T, res *mcp.CallToolResult, id string) {
	t.Helper()
	if res.IsError {
		t.Fatalf("isError; result %+v", res)
	}
	if got := res.Meta[mcpserver.MetaRunID]; got != id {
		t.Errorf("_meta run id = %v; want %s", got, id)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if string(out) != `{"done":3}` {
		t.Errorf("structuredContent = %s; want {\"done\":3}", out)
	}
	if len(res.Content) != 1 {
		t.Fatalf("content = %+v; want the summary", res.Content)
	}
	if text, ok := res.Content[0].(*mcp.TextContent); !ok || text.Text != "did the steps" {
		t.Errorf("content = %+v; want the summary text", res.Content[0])
	}
}

func TestFailedRunIsAnError(t *testing.T) {
	eachRevision(t, func(t *testing.T, rev string) {
		f := newFixture(t)
		cs := mustConnect(t, f.url, rev, nil)
		res, err := cs.CallTool(testContext(t), &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("tools/call: %v", err)
		}
		if !res.IsError {
			t.Fatalf("isError false for a failed run: %+v", res)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var fail jetruntype.Failure
		if err := json.Unmarshal(raw, &fail); err != nil || fail.OK || fail.Status != events.StatusError || fail.Message != "boom" ||
			fail.RunID == "" || fail.RunID != res.Meta[mcpserver.MetaRunID] {
			t.Errorf("structuredContent = %s (%v); want jetrun's failure: status error, error boom, the run id", raw, err)
		}
		if meta, _ := json.Marshal(res.Meta[mcpserver.MetaFailure]); string(meta) != string(raw) {
			t.Errorf("_meta failure = %s; want the failure, as structuredContent (the tool has no output schema)", meta)
		}
		if text, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(text.Text, "boom") {
			t.Errorf("content = %+v; want the failure's text", res.Content)
		}
	})
}

func TestCancelledCallCancelsTheRun(t *testing.T) {
	eachRevision(t, func(t *testing.T, rev string) {
		f := newFixture(t)
		cs := mustConnect(t, f.url, rev, nil)
		ctx := testContext(t)
		const key = "cancel-me"
		id := parent.RunID("mcp", key)
		callCtx, cancelCall := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "block", Arguments: map[string]any{},
				Meta: mcp.Meta{mcpserver.MetaIdempotencyKey: key}})
			done <- err
		}()
		jetruntest.WaitRow(t, f.env.Store, id, 30*time.Second, func(r *model.Row) bool { return r.Status == events.StatusRunning })
		cancelCall() // the SDK sends notifications/cancelled
		if err := <-done; err == nil {
			t.Fatal("a cancelled call answered")
		}
		row := jetruntest.WaitRow(t, f.env.Store, id, 30*time.Second, jetruntest.Final)
		if row.Status != events.StatusAborted {
			t.Errorf("run ended %s; want aborted", row.Status)
		}
	})
}

func TestBadCallsAreJSONRPCErrors(t *testing.T) {
	eachRevision(t, func(t *testing.T, rev string) {
		f := newFixture(t)
		cs := mustConnect(t, f.url, rev, nil)
		ctx := testContext(t)
		for _, tc := range []struct {
			name   string
			params *mcp.CallToolParams
			want   string
		}{
			{"unknown tool", &mcp.CallToolParams{Name: "nope", Arguments: map[string]any{}}, `unknown tool "nope"`},
			{"schema", &mcp.CallToolParams{Name: "steps", Arguments: map[string]any{"steps": "three"}}, "break its input schema"},
			{"oversize", &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{"pad": strings.Repeat("x", mcpserver.MaxArgumentBytes)}}, "the limit is"},
			{"key", &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{}, Meta: mcp.Meta{mcpserver.MetaIdempotencyKey: 7}}, "idempotencyKey"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := cs.CallTool(ctx, tc.params)
				var rpcErr *jsonrpc.Error
				if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, tc.want) {
					t.Fatalf("error = %v; want a JSON-RPC invalid-params error saying %q", err, tc.want)
				}
			})
		}
	})
}

// The endpoint refuses what the MCP specification asks a server to refuse:
// a cross-origin browser request, and on a loopback listener a Host that
// is not loopback (DNS rebinding). The same request without them is served.
func TestMCPRefusesCrossOriginAndRebinding(t *testing.T) {
	f := newFixture(t)
	post := func(header map[string]string, host string) int {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+writeToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(nil, ""); code != http.StatusOK {
		t.Fatalf("a plain initialize: HTTP %d; want 200", code)
	}
	if code := post(map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, ""); code != http.StatusForbidden {
		t.Errorf("a cross-origin browser request: HTTP %d; want 403", code)
	}
	if code := post(nil, "evil.example"); code != http.StatusForbidden {
		t.Errorf("a Host that is not loopback on a loopback listener: HTTP %d; want 403", code)
	}
}
