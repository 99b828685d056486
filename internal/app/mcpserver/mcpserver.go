// Package mcpserver serves jetrun's live agent types as Model Context
// Protocol tools, with the official Go SDK (github.com/modelcontextprotocol/go-sdk)
// for the protocol: parent-worker mounts Handler at /mcp (streamable HTTP)
// and `jetrun mcp` serves ServeStdio for hosts that launch a command.
//
//   - tools/list is the agent registry (registry.ToolOf: description, input
//     and output schemas), read afresh for every list; the registry is also
//     polled (Config.SyncEvery) and a change sends
//     notifications/tools/list_changed to every connected session.
//   - tools/call checks the arguments against the tool's input schema,
//     dispatches a run and awaits it: a completed run answers its output as
//     structuredContent and its summary as text; a run that did not complete
//     answers isError with jetrun's failure value (jetruntype.Failure) in
//     _meta["io.jetrun/failure"], and as structuredContent unless the tool
//     has an output schema. Every result carries the run id in
//     _meta["io.jetrun/runId"].
//   - With a progressToken, the run's progress goes to the client as
//     notifications/progress (progress = the run's fraction, total 1).
//   - Cancelling the call cancels the run: notifications/cancelled in a
//     session (2025-11-25 and older; a session that merely goes away leaves
//     the run running), closing the request in protocol 2026-07-28, which is
//     served sessionless (Handler). Stop ends the calls, not their runs.
//   - The run id: a call with _meta["io.jetrun/idempotencyKey"] = K runs as
//     parent.RunID("mcp", K), so calling again with the same key (from any
//     session, on any parent-worker) re-attaches to that run, or answers its
//     stored outcome, instead of starting another. Without a key every call
//     is a new run.
//
// Bad requests are JSON-RPC errors (-32602, invalid params) whose message
// says why: an unknown tool, arguments that break the input schema (the
// validator's words), arguments over MaxArgumentBytes, a malformed key.
// What the SDK's transport would answer in plain text (a body that is not
// JSON-RPC, an unknown method, a missing session) is a JSON-RPC error too,
// and a call the client cancelled gets no response (wire.go).
//
// A tools/call that declares the tasks extension (io.modelcontextprotocol/tasks)
// in its per-request capabilities gets a task at once: a detached run whose
// task id is the run id, served from JetStream by any parent-worker
// (tasks/get, tasks/update, tasks/cancel; see tasks.go), with status
// notifications (notify.go, listen.go). Sessions also get the 2025-11-25
// experimental tasks form (legacy.go).
package mcpserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
)

// Keys of _meta that jetrun reads on tools/call and writes on its results.
const (
	// MetaIdempotencyKey names the run of a tools/call: the same key is
	// the same run (parent.RunID("mcp", key)).
	MetaIdempotencyKey = "io.jetrun/idempotencyKey"
	// MetaRunID carries the run's id on a tools/call result.
	MetaRunID = "io.jetrun/runId"
	// MetaFailure carries jetrun's failure value on the isError result of
	// a run that did not complete.
	MetaFailure = "io.jetrun/failure"
)

// MaxArgumentBytes bounds a tools/call's arguments: a run's input.
const MaxArgumentBytes = events.MaxInputBytes

// MaxIdempotencyKeyLength bounds MetaIdempotencyKey.
const MaxIdempotencyKeyLength = 256

// DefaultSyncEvery is how often the registry is polled for agent types that
// appear or go.
const DefaultSyncEvery = 2 * time.Second

// progressDrain bounds how long an answer waits for the progress before it
// to be sent.
const progressDrain = 5 * time.Second

// cancelTimeout bounds the cancel of a run whose call the client cancelled.
const cancelTimeout = 10 * time.Second

// Config configures a Server.
type Config struct {
	// Client dispatches, awaits, signals and cancels the tasks' runs.
	Client *parent.Client
	// Runs reads the tasks' rows (kv.New on the Client's runtime).
	Runs *kv.Runs
	// Runtime is the Client's runtime: a waiting task's input request
	// names the signal position of its stored row, which Runs (the read
	// type) does not show.
	Runtime *jetrun.Runtime
	// Logger receives the server's logs (default: discard).
	Logger *slog.Logger
	// SyncEvery is how often the registry is polled for changes to
	// announce (default DefaultSyncEvery).
	SyncEvery time.Duration
	// Version is the server's version in the MCP handshake.
	Version string
	// Retention is how long runs are kept after they end (parent-worker's
	// JETRUN_RETENTION): a task's ttl. 0 keeps them forever (ttl null).
	Retention time.Duration
	// TasksPerPage is how many tasks a tasks/list page holds (default
	// DefaultTasksPerPage).
	TasksPerPage int
}

// DefaultTasksPerPage is Config.TasksPerPage's default.
const DefaultTasksPerPage = 50

// Server is jetrun's MCP server: one per process, shared by every session.
type Server struct {
	client    *parent.Client
	runs      *kv.Runs
	rt        *jetrun.Runtime
	log       *slog.Logger
	every     time.Duration
	retention time.Duration
	perPage   int
	mcp       *mcp.Server

	syncMu sync.Mutex // one sync at a time
	mu     sync.Mutex
	tools  map[string]tool // what s.mcp lists

	life context.Context // ends at Stop: calls stop awaiting, runs go on
	stop context.CancelFunc
	loop sync.WaitGroup

	cancels cancels // the calls in flight in sessions' POSTs (wire.go)

	notifyMu  sync.Mutex
	outlets   map[string][]*outlet // connected sessions' streams by session id (notify.go)
	watches   map[*mcp.ServerSession]*sessionWatch
	approving map[string]bool // tasks whose approval this server awaits (taskapproval.go), under notifyMu
}

// tool is a listed tool and its compiled input schema.
type tool struct {
	registry.Tool
	schema *registry.Schema
}

// New returns a Server; Start begins following the registry.
func New(cfg Config) *Server {
	s := &Server{client: cfg.Client, runs: cfg.Runs, rt: cfg.Runtime, log: cfg.Logger, every: cfg.SyncEvery, retention: max(cfg.Retention, 0),
		perPage: cmp.Or(max(cfg.TasksPerPage, 0), DefaultTasksPerPage), tools: map[string]tool{},
		outlets: map[string][]*outlet{}, watches: map[*mcp.ServerSession]*sessionWatch{}, approving: map[string]bool{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.every <= 0 {
		s.every = DefaultSyncEvery
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s.life, s.stop = context.WithCancel(context.Background())
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}
	caps.AddExtension(TasksExtension, nil)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "jetrun", Title: "jetrun agents", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: "Every tool is a jetrun agent type: a call runs it durably and answers its output. " +
			"Pass _meta[\"" + MetaIdempotencyKey + "\"] to make a retried call re-attach to its run.",
		Logger:       s.log,
		Capabilities: caps,
	})
	s.mcp.AddReceivingMiddleware(s.fresh)
	if err := s.addTasks(); err != nil {
		panic(err) // only a name clash with a standard method: a programming error
	}
	return s
}

// Start lists the registry's agent types as tools, then polls it every
// SyncEvery until Stop or ctx ends. A failed listing is logged and tried
// again at the next poll (tools/list reads the registry itself anyway).
func (s *Server) Start(ctx context.Context) {
	if err := s.sync(ctx); err != nil {
		s.log.WarnContext(ctx, "mcp: list the agent types", "err", err)
	}
	s.loop.Go(func() {
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.life.Done():
				return
			case <-t.C:
			}
			if err := s.sync(s.life); err != nil && s.life.Err() == nil {
				s.log.WarnContext(ctx, "mcp: list the agent types", "err", err)
			}
		}
	})
}

// Stop stops polling the registry and following tasks for notifications,
// and the calls in flight stop awaiting their runs (which go on: the same
// idempotency key re-attaches). Idempotent.
func (s *Server) Stop() {
	s.notifyMu.Lock() // no follower starts after this (watchTask)
	s.stop()
	s.notifyMu.Unlock()
	s.loop.Wait()
}

// Handler returns the streamable HTTP transport. A request of protocol
// 2026-07-28 or later (its Mcp-Protocol-Version header) is served
// sessionless: any parent-worker answers it, and closing its response
// stream cancels it, as that revision says. Older revisions get sessions
// (Mcp-Session-Id), which live in this process. It refuses cross-origin
// browser requests (http.CrossOriginProtection) and, on a loopback
// listener, requests naming another host (the SDK's DNS rebinding
// protection); bearer tokens are the caller's (parent-worker mounts it
// behind its API's).
func (s *Server) Handler() http.Handler {
	get := func(*http.Request) *mcp.Server { return s.mcp }
	opts := mcp.StreamableHTTPOptions{Logger: s.log, MaxRequestBodyBytes: 2 * MaxArgumentBytes}
	sessions := mcp.NewStreamableHTTPHandler(get, &opts)
	opts.Stateless, opts.PropagateRequestCancellation = true, true
	sessionless := mcp.NewStreamableHTTPHandler(get, &opts)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Mcp-Protocol-Version") >= SessionlessRevision:
			if !s.serveTaskListen(w, r, opts.MaxRequestBodyBytes) { // a listen naming tasks (listen.go)
				s.servePost(sessionless, w, r, opts.MaxRequestBodyBytes, false) // JSON-RPC on the wire (wire.go)
			}
		case r.Method == http.MethodGet && r.Header.Get("Mcp-Session-Id") != "":
			s.serveStream(sessions, w, r) // a session's own stream: its task notifications too
		default:
			s.servePost(sessions, w, r, opts.MaxRequestBodyBytes, true)
		}
	})
	return http.NewCrossOriginProtection().Handler(h)
}

// SessionlessRevision is the first protocol revision served without
// sessions.
const SessionlessRevision = "2026-07-28"

// ServeStdio serves one session on in and out (newline-delimited JSON-RPC)
// until the peer closes in or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	t := &stdioTransport{Transport: &mcp.IOTransport{Reader: in, Writer: out}, s: s}
	err := s.mcp.Run(ctx, t)
	if t.unplug != nil {
		t.unplug()
	}
	if ctx.Err() != nil || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// fresh reads the registry before tools/list, and before a tools/call of a
// tool not listed yet, so both see the agent types of this moment; a
// tools/call that declares the tasks extension becomes a task (tasks.go).
func (s *Server) fresh(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		refresh := method == "tools/list"
		call, isCall := req.(*mcp.CallToolRequest)
		isCall = isCall && method == "tools/call"
		if isCall {
			_, listed := s.tool(call.Params.Name)
			refresh = !listed
		}
		if refresh {
			if err := s.sync(ctx); err != nil {
				s.log.WarnContext(ctx, "mcp: list the agent types", "err", err)
			}
		}
		switch {
		case isCall && wantsTask(call.Params.Meta):
			return s.startTask(ctx, call, false)
		case isCall && wantsLegacyTask(call.Params.Meta) && legacySession(call.Session):
			return s.startTask(ctx, call, true)
		}
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		// What the SDK's types cannot say (legacy.go).
		switch r := res.(type) {
		case *mcp.InitializeResult:
			return initializeResult{r}, nil
		case *mcp.ListToolsResult:
			return listToolsResult{r}, nil
		}
		return res, nil
	}
}

// sync makes the listed tools the registry's live agent types; the SDK
// sends notifications/tools/list_changed for each change.
func (s *Server) sync(ctx context.Context) error {
	agents, err := s.client.Agents(ctx)
	if err != nil {
		return err
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	live := map[string]bool{}
	for _, a := range agents {
		t := registry.ToolOf(a)
		live[t.Name] = true
		if old, ok := s.tool(t.Name); ok && sameTool(old.Tool, t) {
			continue
		}
		schema, err := registry.Compile(t.InputSchema)
		if err != nil {
			s.log.WarnContext(ctx, "mcp: agent type's input schema does not compile; not listed", "agent_type", t.Name, "err", err)
			continue
		}
		s.mu.Lock()
		s.tools[t.Name] = tool{Tool: t, schema: schema}
		s.mu.Unlock()
		mt := &mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
		if len(t.OutputSchema) > 0 {
			mt.OutputSchema = t.OutputSchema
		}
		s.mcp.AddTool(mt, s.call)
	}
	var gone []string
	s.mu.Lock()
	for name := range s.tools {
		if !live[name] {
			gone = append(gone, name)
			delete(s.tools, name)
		}
	}
	s.mu.Unlock()
	if len(gone) > 0 {
		slices.Sort(gone)
		s.mcp.RemoveTools(gone...)
	}
	return nil
}

func sameTool(a, b registry.Tool) bool {
	return a.Name == b.Name && a.Description == b.Description && a.Wrapped == b.Wrapped &&
		bytes.Equal(a.InputSchema, b.InputSchema) && bytes.Equal(a.OutputSchema, b.OutputSchema)
}

func (s *Server) tool(name string) (tool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tools[name]
	return t, ok
}

// invalidParams is a JSON-RPC error for a request the client got wrong.
func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// call handles tools/call: dispatch, await, answer.
func (s *Server) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	t, ok := s.tool(name)
	if !ok {
		return nil, invalidParams("unknown tool %q: no live worker serves the agent type", name)
	}
	input, err := t.input(req.Params.Arguments)
	if err != nil {
		return nil, err
	}
	id, err := runID(req.Params.Meta)
	if err != nil {
		return nil, err
	}
	preq := parent.Request{AgentType: name, RunID: id, Input: input}
	if err := delegation(req.Params.Meta, &preq); err != nil {
		return nil, err
	}
	d, err := s.client.Dispatch(ctx, preq)
	if err != nil {
		return nil, dispatchError(name, err)
	}
	if d.Rejected != nil {
		return rejected(preq.RunID, d.Rejected), nil
	}
	id = d.Run.ID

	// wait ends with the call (a cancel from the client) or with the server.
	wait, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	stopLife := context.AfterFunc(s.life, stopWaiting)
	defer stopLife()
	if token := req.Params.GetProgressToken(); token != nil {
		followed := make(chan struct{})
		go func() {
			defer close(followed)
			s.progress(wait, req.Session, token, id)
		}()
		// The follower reads the run's events up to its end: let it send
		// the last progress before the answer goes, for a bounded time.
		defer func() {
			t := time.NewTimer(progressDrain)
			defer t.Stop()
			select {
			case <-followed:
			case <-t.C:
			}
			stopWaiting()
			<-followed
		}()
	}
	res, err := s.client.Await(wait, id)
	switch {
	case s.life.Err() != nil:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("the server is stopping; run %s goes on: call again with the same %s to re-attach", id, MetaIdempotencyKey)}
	case ctx.Err() != nil:
		// Only notifications/cancelled cancels a call's context without a
		// cause (a broken connection gives its error as the cause): the
		// client gave the call up, so the run stops too.
		if context.Cause(ctx) == context.Canceled { //nolint:errorlint // the cause-less cancel itself, not an error wrapping it
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
			defer cancel()
			if _, err := s.client.Cancel(cctx, id, "cancelled by the MCP client"); err != nil {
				s.log.WarnContext(ctx, "mcp: cancel the run of a cancelled call", "run_id", id, "err", err)
			}
		}
		return nil, ctx.Err()
	}
	var f *parent.Failure
	if errors.As(err, &f) {
		return s.failed(f, name), nil
	}
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("await run %s: %v", id, err)}
	}
	return completed(res), nil
}

// input checks a call's arguments and returns the run's input.
func (t tool) input(args json.RawMessage) (json.RawMessage, error) {
	if len(args) > MaxArgumentBytes {
		return nil, invalidParams("arguments of tool %q are %d bytes; the limit is %d", t.Name, len(args), MaxArgumentBytes)
	}
	if trimmed := bytes.TrimSpace(args); len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		args = json.RawMessage("{}")
	}
	if err := t.schema.Validate(args); err != nil {
		return nil, invalidParams("arguments of tool %q break its input schema: %v", t.Name, err)
	}
	if !t.Wrapped {
		return args, nil
	}
	var w struct {
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(args, &w); err != nil {
		return nil, invalidParams("arguments of tool %q: %v", t.Name, err)
	}
	return w.Input, nil
}

// runID is the run a call names with MetaIdempotencyKey, else "" (Dispatch
// then picks a new one, and its row says which).
func runID(meta mcp.Meta) (string, error) {
	v, ok := meta[MetaIdempotencyKey]
	if !ok {
		return "", nil
	}
	key, ok := v.(string)
	if !ok || key == "" || len(key) > MaxIdempotencyKeyLength {
		return "", invalidParams("_meta[%q] must be a string of 1 to %d characters", MetaIdempotencyKey, MaxIdempotencyKeyLength)
	}
	return parent.RunID("mcp", key), nil
}

// dispatchError maps a failed dispatch to a JSON-RPC error.
func dispatchError(name string, err error) error {
	switch {
	case errors.Is(err, parent.ErrUnknownAgentType):
		return invalidParams("unknown tool %q: %v", name, err)
	case errors.Is(err, parent.ErrBadRequest):
		return invalidParams("tool %q: %v", name, err)
	case errors.Is(err, parent.ErrRunIDConflict):
		return invalidParams("the %s is taken by a call of another tool: %v", MetaIdempotencyKey, err)
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("dispatch a run of %q: %v", name, err)}
}

// completed is the result of a completed run: the output as structured
// content (an output that is not an object as {"output": value}, since MCP
// wants an object), the summary as text (the output's JSON without one).
func completed(res *parent.Result) *mcp.CallToolResult {
	out := &mcp.CallToolResult{Meta: mcp.Meta{MetaRunID: res.RunID}}
	if len(res.Output) > 0 {
		if trimmed := bytes.TrimSpace(res.Output); len(trimmed) > 0 && trimmed[0] == '{' {
			out.StructuredContent = json.RawMessage(trimmed)
		} else {
			out.StructuredContent = map[string]json.RawMessage{"output": res.Output}
		}
	}
	text := res.Summary
	if text == "" {
		text = string(res.Output)
	}
	out.Content = []mcp.Content{&mcp.TextContent{Text: text}}
	return out
}

// progress sends the run's progress to the client as notifications/progress
// until the run ends or ctx does. MCP wants progress to increase: a
// fraction that does not (a new attempt starting over) is not sent.
func (s *Server) progress(ctx context.Context, ss *mcp.ServerSession, token any, id string) {
	seq, err := s.client.Replay(ctx, id, parent.ReplayOptions{Kinds: []string{events.KindProgress}})
	if err != nil {
		return
	}
	last := -1.0
	for ev, err := range seq {
		if err != nil {
			return
		}
		p := ev.Progress
		if p == nil || p.Fraction <= last {
			continue
		}
		last = p.Fraction
		msg := p.Message
		if msg == "" {
			msg = p.Phase
		}
		if err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: p.Fraction, Total: 1, Message: msg}); err != nil {
			return
		}
	}
}
