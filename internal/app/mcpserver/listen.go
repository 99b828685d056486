package mcpserver

// subscriptions/listen with notifications.taskIds (protocol 2026-07-28, the
// tasks extension): the Go SDK v1.8.0 decodes the listen without taskIds,
// so jetrun serves such a listen itself, before the SDK: it acknowledges
// the known tasks (at most MaxWatchedTasks; other subscriptions asked on
// the same listen are not agreed to: open another listen for them), sends
// each task's current state and every new status as notifications/tasks,
// and ends the listen with its result once every task is terminal. Any
// parent-worker serves it, for any task.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// listenRequest is a subscriptions/listen request as jetrun reads it.
type listenRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Meta          mcp.Meta `json:"_meta"`
		Notifications struct {
			TaskIDs []string `json:"taskIds"`
		} `json:"notifications"`
	} `json:"params"`
}

// serveTaskListen serves r if it is a subscriptions/listen naming tasks,
// and reports whether it did; else r's body is left for the SDK.
func (s *Server) serveTaskListen(w http.ResponseWriter, r *http.Request, limit int64) bool {
	if r.Method != http.MethodPost || r.Body == nil {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	rest := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), rest), rest}
	if err != nil || int64(len(body)) > limit {
		return false
	}
	var req listenRequest
	if json.Unmarshal(body, &req) != nil || req.Method != "subscriptions/listen" || len(req.Params.Notifications.TaskIDs) == 0 || len(req.ID) == 0 {
		return false
	}
	if rebinding(r) { // what the SDK's handler refuses, refused here too
		http.Error(w, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host), http.StatusForbidden)
		return true
	}
	ctx := r.Context()
	if !wantsTask(req.Params.Meta) {
		writeRPC(w, req.ID, nil, missingTasksCapability())
		return true
	}

	// The tasks that exist, each once, within the bound.
	var agreed []string
	seen := map[string]bool{}
	for _, id := range req.Params.Notifications.TaskIDs {
		if seen[id] || len(agreed) >= MaxWatchedTasks {
			continue
		}
		seen[id] = true
		if _, err := s.taskRow(ctx, id); err == nil {
			agreed = append(agreed, id)
		}
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	sw := &streamWriter{ResponseWriter: w}
	defer sw.close()
	sw.WriteHeader(http.StatusOK)
	subscription := mcp.Meta{mcp.MetaKeySubscriptionID: json.RawMessage(req.ID)}
	send := func(method string, params any) error {
		raw, err := json.Marshal(params)
		if err != nil {
			return err
		}
		msg, err := notification(method, raw)
		if err != nil {
			return err
		}
		return sw.event(msg)
	}
	if err := send("notifications/subscriptions/acknowledged", map[string]any{
		"notifications": map[string]any{"taskIds": agreed}, "_meta": subscription}); err != nil {
		return true
	}

	// One follower per task, on this request: they end with it, with the
	// server, or when their task is terminal.
	follow, stop := context.WithCancel(ctx)
	defer stop()
	stopLife := context.AfterFunc(s.life, stop)
	defer stopLife()
	var followers sync.WaitGroup
	for _, id := range agreed {
		followers.Go(func() {
			s.follow(follow, id, "", false, func(t *Task) {
				_ = send(NotificationTaskStatus, struct {
					*Task
					Meta mcp.Meta `json:"_meta"`
				}{t, subscription})
			})
		})
	}
	followers.Wait()
	if follow.Err() == nil { // every task is terminal: the listen ends
		raw, _ := json.Marshal(map[string]any{"resultType": "complete", "_meta": subscription})
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": json.RawMessage(raw)})
		_ = sw.event(msg)
	}
	return true
}

// writeRPC answers a JSON-RPC request with result or err, as JSON.
func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, err error) {
	resp := map[string]any{"jsonrpc": "2.0", "id": id}
	if rpcErr, ok := err.(*jsonrpc.Error); ok {
		resp["error"] = rpcErr
	} else {
		resp["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// rebinding reports a request to a loopback listener that names another
// host: a DNS rebinding attack, which the SDK's handler refuses.
func rebinding(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && loopback(local.String()) && !loopback(r.Host)
}

func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
