package mcpserver

// JSON-RPC on the wire, where the Go SDK v1.8.0's streamable HTTP handler
// falls short of JSON-RPC and MCP: jetrun reads each POST before the SDK
// and fixes what a client sees.
//
//   - A body that is not JSON is answered -32700 (parse error), one that is
//     JSON but no JSON-RPC message -32600 (invalid request), both HTTP 400
//     with id null; the SDK answered them in plain text.
//   - What the SDK refuses in plain text with HTTP 400 becomes a JSON-RPC
//     error: an unknown method is -32601 (method not found), answered with
//     HTTP 200 like any error of a call in a session (sessionless, the SDK
//     answers it itself, -32601 with HTTP 404); anything else stays HTTP
//     400 with a -32600 error carrying the SDK's words.
//
// In sessions (protocol 2025-11-25 and older) also:
//
//   - A request without Mcp-Session-Id other than initialize (and
//     server/discover) is refused, as MCP says, with HTTP 400 and a -32600
//     error for its id; the SDK opened a session for it that was never
//     initialized and answered HTTP 200 with an error of code 0.
//   - A request the client cancelled (notifications/cancelled) gets no
//     response, as MCP says: the SDK answers it with an error of code 0
//     ("context canceled"), which jetrun drops from the request's stream
//     (over HTTP, see postWriter; over stdio, cancelFilter).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// knownMethods are the methods served: the SDK's server's (v1.8.0) and
// jetrun's tasks methods (tasks.go, legacy.go). A request the SDK refuses
// for a method not among them names an unknown one.
var knownMethods = []string{
	"initialize", "ping", "server/discover", "subscriptions/listen", "logging/setLevel", "completion/complete",
	"tools/list", "tools/call", "prompts/list", "prompts/get",
	"resources/list", "resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe",
	"notifications/initialized", "notifications/cancelled", "notifications/progress", "notifications/roots/list_changed",
	"tasks/get", "tasks/update", "tasks/cancel", "tasks/result", "tasks/list",
}

// opensSession lists the requests a client sends without a session.
var opensSession = []string{"initialize", "server/discover"}

// posted is what a POST carries, as jetrun reads it.
type posted struct {
	msgs  []jsonrpc.Message
	batch bool
}

// readPosted decodes a POST body: the JSON-RPC error it deserves when it is
// not one or more JSON-RPC messages.
func readPosted(body []byte) (posted, *jsonrpc.Error) {
	if !json.Valid(body) {
		return posted{}, &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "Parse error: the body is not JSON"}
	}
	invalid := func(err error) *jsonrpc.Error {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("Invalid Request: %v", err)}
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(t, &raws); err != nil || len(raws) == 0 {
			return posted{}, invalid(fmt.Errorf("an empty batch"))
		}
		p := posted{batch: true}
		for _, raw := range raws {
			msg, err := jsonrpc.DecodeMessage(raw)
			if err != nil {
				return posted{}, invalid(err)
			}
			p.msgs = append(p.msgs, msg)
		}
		return p, nil
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return posted{}, invalid(err)
	}
	return posted{msgs: []jsonrpc.Message{msg}}, nil
}

// single returns the one request a POST carries, if it carries one.
func (p posted) single() (*jsonrpc.Request, bool) {
	if p.batch || len(p.msgs) != 1 {
		return nil, false
	}
	req, ok := p.msgs[0].(*jsonrpc.Request)
	return req, ok
}

// opensSession reports whether the POST may come without a session.
func (p posted) opensSession() bool {
	return slices.ContainsFunc(p.msgs, func(m jsonrpc.Message) bool {
		req, ok := m.(*jsonrpc.Request)
		return ok && slices.Contains(opensSession, req.Method)
	})
}

// writeRPCError answers with a JSON-RPC error for id (id null when it is
// not valid) and HTTP status.
func writeRPCError(w http.ResponseWriter, status int, id jsonrpc.ID, rpcErr *jsonrpc.Error) {
	data, err := json.Marshal(struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", id.Raw(), rpcErr})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// servePost serves a POST through the SDK (sessions: in sessions, protocol
// 2025-11-25 and older), with the fixes this file's comment lists. Other
// methods, a body over limit and a request the SDK refuses for its headers
// (not JSON, or a DNS rebinding) are left to the SDK.
func (s *Server) servePost(sdk http.Handler, w http.ResponseWriter, r *http.Request, limit int64, sessions bool) {
	if r.Method != http.MethodPost || r.Body == nil {
		sdk.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	rest := r.Body
	if err != nil || int64(len(body)) > limit || !jsonContent(r) || rebinding(r) {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), rest), rest}
		sdk.ServeHTTP(w, r)
		return
	}
	_ = rest.Close()
	p, rpcErr := readPosted(body)
	if rpcErr != nil {
		writeRPCError(w, http.StatusBadRequest, jsonrpc.ID{}, rpcErr)
		return
	}
	sid := r.Header.Get("Mcp-Session-Id")
	if sessions && sid == "" && !p.opensSession() {
		var id jsonrpc.ID
		if req, ok := p.single(); ok {
			id = req.ID
		}
		writeRPCError(w, http.StatusBadRequest, id, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: "Bad Request: no Mcp-Session-Id header; a session begins with initialize"})
		return
	}
	if req, ok := p.single(); ok && req.Method == "tools/call" {
		body = liftTask(body) // params.task of the 2025-11-25 form (legacy.go)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))

	sw := &postWriter{ResponseWriter: w, s: s}
	if sessions && sid != "" {
		sw.calls = s.cancels.posted(sid, p.msgs)
		defer s.cancels.done(sw.calls)
	}
	sdk.ServeHTTP(sw, r)
	sw.refused(p)
}

// jsonContent reports whether r says its body is JSON, as the SDK wants.
func jsonContent(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// postWriter is the response to a POST as the SDK writes it: it drops the
// responses to calls the client cancelled, and holds a plain-text refusal
// back for refused to answer as JSON-RPC.
type postWriter struct {
	http.ResponseWriter
	s     *Server
	calls []string // in a session, the keys of the calls of this POST (cancels.posted)

	refusal     bool // the SDK refused the POST in plain text
	refusalText bytes.Buffer
}

func (w *postWriter) WriteHeader(code int) {
	if code == http.StatusBadRequest && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.refusal = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *postWriter) Write(b []byte) (int, error) {
	if w.refusal {
		return w.refusalText.Write(b)
	}
	if len(w.calls) > 0 && w.s.cancels.cancelledResponse(w.calls, b) {
		return len(b), nil // as if sent: the stream goes on, and ends
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes what was written; http.NewResponseController finds it.
func (w *postWriter) Flush() {
	if !w.refusal {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap lets http.NewResponseController reach the connection.
func (w *postWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refused answers the SDK's plain-text refusal of p as a JSON-RPC error:
// -32601 with HTTP 200 for a call of an unknown method (what a session
// answers a call it does not serve), else -32600 with HTTP 400.
func (w *postWriter) refused(p posted) {
	if !w.refusal {
		return
	}
	w.Header().Del("Content-Type")
	req, single := p.single()
	var id jsonrpc.ID
	if single {
		id = req.ID
	}
	if single && !slices.Contains(knownMethods, req.Method) {
		status := http.StatusBadRequest
		if req.IsCall() {
			status = http.StatusOK
		}
		writeRPCError(w.ResponseWriter, status, id, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
			Message: fmt.Sprintf("Method not found: %q", req.Method)})
		return
	}
	writeRPCError(w.ResponseWriter, http.StatusBadRequest, id, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
		Message: "Invalid Request: " + strings.TrimSpace(w.refusalText.String())})
}

// cancels knows, per session, the calls in flight in this process's POSTs
// and which of them the client cancelled: their responses are dropped.
type cancels struct {
	mu    sync.Mutex
	calls map[string]bool // session id + "\x00" + request id key → cancelled
}

// idKey is a request id as a map key: its type and value.
func idKey(id jsonrpc.ID) string { return fmt.Sprintf("%T:%v", id.Raw(), id.Raw()) }

// posted records the calls of a session's POST (returning the keys it
// took, for done) and the cancels it carries.
func (c *cancels) posted(session string, msgs []jsonrpc.Message) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]bool{}
	}
	var took []string
	for _, m := range msgs {
		req, ok := m.(*jsonrpc.Request)
		if !ok {
			continue
		}
		switch {
		case req.IsCall():
			k := session + "\x00" + idKey(req.ID)
			if _, dup := c.calls[k]; !dup { // a duplicate the SDK refuses
				c.calls[k] = false
				took = append(took, k)
			}
		case req.Method == "notifications/cancelled":
			if id, ok := cancelledID(req.Params); ok {
				k := session + "\x00" + idKey(id)
				if _, live := c.calls[k]; live {
					c.calls[k] = true
				}
			}
		}
	}
	return took
}

// done forgets the calls of a POST that is over.
func (c *cancels) done(keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		delete(c.calls, k)
	}
}

// cancelledResponse reports whether event, one SSE event the SDK writes on
// the stream of a session's POST whose calls are keys, is the response to
// one of them that the client cancelled. Events are read only once a call
// of the POST was cancelled.
func (c *cancels) cancelledResponse(keys []string, event []byte) bool {
	c.mu.Lock()
	cancelled := slices.ContainsFunc(keys, func(k string) bool { return c.calls[k] })
	c.mu.Unlock()
	if !cancelled {
		return false
	}
	for line := range bytes.SplitSeq(event, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		msg, err := jsonrpc.DecodeMessage(data)
		resp, isResp := msg.(*jsonrpc.Response)
		if err != nil || !isResp {
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, k := range keys {
			if c.calls[k] && strings.HasSuffix(k, "\x00"+idKey(resp.ID)) {
				return true
			}
		}
		return false
	}
	return false
}

// cancelledID is the request a notifications/cancelled names.
func cancelledID(params json.RawMessage) (jsonrpc.ID, bool) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || p.RequestID == nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	return id, err == nil && id.IsValid()
}

// cancelFilter is a stdio connection that does not answer the requests
// the client cancelled.
type cancelFilter struct {
	mcp.Connection
	mu    sync.Mutex
	calls map[string]bool // request id key → cancelled, while in flight
}

func (c *cancelFilter) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil {
		c.mu.Lock()
		if c.calls == nil {
			c.calls = map[string]bool{}
		}
		switch {
		case req.IsCall():
			c.calls[idKey(req.ID)] = false
		case req.Method == "notifications/cancelled":
			if id, ok := cancelledID(req.Params); ok {
				if _, live := c.calls[idKey(id)]; live {
					c.calls[idKey(id)] = true
				}
			}
		}
		c.mu.Unlock()
	}
	return msg, err
}

func (c *cancelFilter) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		k := idKey(resp.ID)
		cancelled := c.calls[k]
		delete(c.calls, k)
		c.mu.Unlock()
		if cancelled {
			return nil
		}
	}
	return c.Connection.Write(ctx, msg)
}
