package mcpserver

// Task status notifications. A session (protocol 2025-11-25 and older, over
// HTTP or stdio) that created a task or polled it is told when the task's status
// changes, while it is connected: the server follows the run's events and,
// at each, reads the task again; a new status goes to the session as
// notifications/tasks (the extension's DetailedTask), or, for a task of the
// 2025-11-25 form (legacy.go), notifications/tasks/status. Each session follows
// at most MaxWatchedTasks tasks; its followers stop when the session ends,
// when their run ends, or at Stop.
//
// The Go SDK v1.8.0 sends only the notifications it knows, so these are
// written by jetrun itself: over streamable HTTP as an event of the
// session's standalone SSE stream (its GET), which must be open; over stdio
// as a line of the connection. Without a session (2026-07-28) task
// notifications go on a subscriptions/listen that names the tasks
// (listen.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// MaxWatchedTasks bounds the tasks a session is told about.
const MaxWatchedTasks = 64

// NotificationTaskStatus is the extension's task status notification.
const NotificationTaskStatus = "notifications/tasks"

// watchedKinds are the events after which a followed task is read again.
var watchedKinds = []string{events.KindStatus, events.KindProgress, events.KindSignal, events.KindCall, events.KindReply, events.KindCancel}

// finalReads bounds the reads of a row after its run's end event, for the
// row to show the end.
const finalReads = 20

// outlet writes one JSON-RPC notification to a connected session.
type outlet func(ctx context.Context, method string, params json.RawMessage) error

// sessionWatch is what one session follows.
type sessionWatch struct {
	ctx   context.Context // ends with the session or the server
	tasks map[string]bool
}

// outletsOf returns the outlets of session id ("" is the stdio session),
// newest first: a session may have a stream that is ending and its
// successor, or a request naming it that the SDK is about to refuse.
func (s *Server) outletsOf(id string) []outlet {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	var out []outlet
	for _, o := range slices.Backward(s.outlets[id]) {
		out = append(out, *o)
	}
	return out
}

// plug adds o to the outlets of session id until the returned func is
// called.
func (s *Server) plug(id string, o outlet) (unplug func()) {
	p := &o
	s.notifyMu.Lock()
	s.outlets[id] = append(s.outlets[id], p)
	s.notifyMu.Unlock()
	return func() {
		s.notifyMu.Lock()
		defer s.notifyMu.Unlock()
		s.outlets[id] = slices.DeleteFunc(s.outlets[id], func(x *outlet) bool { return x == p })
		if len(s.outlets[id]) == 0 {
			delete(s.outlets, id)
		}
	}
}

// sessionOf returns what session ss follows; s.notifyMu is held. The
// session's end forgets it.
func (s *Server) sessionOf(ss *mcp.ServerSession) *sessionWatch {
	if w, ok := s.watches[ss]; ok {
		return w
	}
	ctx, cancel := context.WithCancel(s.life)
	w := &sessionWatch{ctx: ctx, tasks: map[string]bool{}}
	s.watches[ss] = w
	go func() { // owned by the session: ends with it or with the server
		done := make(chan struct{})
		go func() { _ = ss.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
		cancel()
		s.notifyMu.Lock()
		delete(s.watches, ss)
		s.notifyMu.Unlock()
	}()
	return w
}

// watchTask follows task id for session ss, which has just seen it with
// status seen, in the extension's form or (legacy) the 2025-11-25 one.
// Sessionless requests and sessions over their bound are not followed.
func (s *Server) watchTask(ss *mcp.ServerSession, id, seen string, legacy bool) {
	if ss == nil || terminal(seen) || !legacySession(ss) {
		return
	}
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if s.life.Err() != nil { // stopped: s.loop takes no more (Stop)
		return
	}
	w := s.sessionOf(ss)
	if w.tasks[id] || len(w.tasks) >= MaxWatchedTasks {
		return
	}
	w.tasks[id] = true
	s.loop.Go(func() {
		defer func() {
			s.notifyMu.Lock()
			delete(w.tasks, id)
			s.notifyMu.Unlock()
		}()
		sid := ss.ID()
		s.follow(w.ctx, id, seen, legacy, func(t *Task) { s.notifyTask(w.ctx, sid, t, legacy) })
	})
}

func terminal(status string) bool {
	return status == TaskCompleted || status == TaskFailed || status == TaskCancelled
}

// follow sends each new status of task id (in the extension's form or,
// legacy, the 2025-11-25 one) until it is terminal or ctx ends.
func (s *Server) follow(ctx context.Context, id, seen string, legacy bool, send func(*Task)) {
	after, err := s.client.LastEventSeq(ctx, id)
	if err != nil {
		return
	}
	tell := func() bool { // reads the task; false when it is over
		t, err := s.taskOf(ctx, id)
		if err != nil {
			return false
		}
		status := t.Status
		if legacy {
			status = legacyStatus(t)
		}
		if status != seen {
			seen = status
			send(t)
		}
		return !terminal(seen)
	}
	if !tell() { // what happened before the follow began
		return
	}
	seq, err := s.client.Replay(ctx, id, parent.ReplayOptions{After: after, Kinds: watchedKinds})
	if err != nil {
		return
	}
	for _, err := range seq {
		if err != nil || !tell() {
			return
		}
	}
	// The run ended: its row shows it soon after its end event.
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for range finalReads {
		if !tell() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// notifyTask sends task t to session sid if it is connected: through its
// newest outlet that takes it.
func (s *Server) notifyTask(ctx context.Context, sid string, t *Task, legacyForm bool) {
	method, params, err := NotificationTaskStatus, []byte(nil), error(nil)
	if legacyForm {
		method = NotificationTaskStatusLegacy
		params, err = json.Marshal(legacy(t))
	} else {
		params, err = json.Marshal(t)
	}
	if err != nil {
		return
	}
	for _, o := range s.outletsOf(sid) {
		if err = o(ctx, method, params); err == nil {
			return
		}
	}
	if err != nil {
		s.log.DebugContext(ctx, "mcp: task notification not sent", "task_id", t.TaskID, "err", err)
	}
}

// notification is a JSON-RPC notification's wire form.
func notification(method string, params json.RawMessage) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
	}{"2.0", method, params})
}

// streamWriter is the response of a session's standalone SSE stream (its
// GET), shared by the SDK and jetrun's notifications: a write is one whole
// event, under a lock.
type streamWriter struct {
	http.ResponseWriter
	mu      sync.Mutex
	header  bool // the status is sent
	started bool // ... and it is 200: the stream is open
	closed  bool // the request is over: nothing more may be written
}

func (w *streamWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.header {
		w.header, w.started = true, code == http.StatusOK
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *streamWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.header { // an implicit 200
		w.header, w.started = true, true
	}
	return w.ResponseWriter.Write(b)
}

// close ends jetrun's writes: the request is over.
func (w *streamWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}

func (w *streamWriter) FlushError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// event writes one SSE event of data, once the SDK has started the stream.
func (w *streamWriter) event(data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started || w.closed {
		return fmt.Errorf("the stream is not open")
	}
	if _, err := fmt.Fprintf(w.ResponseWriter, "data: %s\n\n", data); err != nil {
		return err
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// serveStream serves a session's standalone SSE stream through the SDK,
// the stream being the session's outlet meanwhile.
func (s *Server) serveStream(sdk http.Handler, w http.ResponseWriter, r *http.Request) {
	sw := &streamWriter{ResponseWriter: w}
	unplug := s.plug(r.Header.Get("Mcp-Session-Id"), func(_ context.Context, method string, params json.RawMessage) error {
		msg, err := notification(method, params)
		if err != nil {
			return err
		}
		return sw.event(msg)
	})
	defer func() { sw.close(); unplug() }()
	sdk.ServeHTTP(sw, r)
}

// stdioTransport makes its connection the outlet of the stdio session.
type stdioTransport struct {
	mcp.Transport
	s      *Server
	unplug func()
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	t.unplug = t.s.plug("", func(ctx context.Context, method string, params json.RawMessage) error {
		return c.Write(ctx, &jsonrpc.Request{Method: method, Params: params})
	})
	return liftingConn{&cancelFilter{Connection: c}}, nil
}
