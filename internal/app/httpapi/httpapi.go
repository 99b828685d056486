// Package httpapi serves parent-worker's HTTP API and web UI:
//
//	GET    /healthz                       200 while NATS is connected and JetStream answers, else 503 with the reason
//	GET    /livez, /readyz                orchestrator probes (probes.go)
//	POST   /v1/runs                       dispatch {agentType, runId?, input, detached?, ...}; ?wait=true awaits
//	POST   /v1/runs:batch                 dispatch many {runs: [...]} (at most MaxBatchRuns): a result per run
//	GET    /v1/runs                       run summaries, newest first: ?status=a,b&agentType=&parent=&parentToolCallId=&forkedFrom=&limit=&cursor=
//	GET    /v1/runs/live                  server-sent events: every run change
//	GET    /v1/runs/{id}                  one row; 404 for an unknown or malformed id
//	GET    /v1/runs/{id}/events           server-sent events: the run's history, then live (Last-Event-ID resumes)
//	GET    /v1/runs/{id}/trace            the run's tree: runs and steps with times, status, usage, totals (trace.go)
//	POST   /v1/runs/{id}:rerun            a new run given the run's steps before fromStep (rerun.go); also diff, :rerun batch
//	POST   /v1/runs/{id}/cancel           cancel {reason?}, with the run's descendants; idempotent
//	POST   /v1/runs/{id}/signals/{name}   send a signal (the body is its JSON payload)
//	DELETE /v1/runs                       clear: ?status=a,b&olderThan=24h (or ?all=true); live runs are cancelled first
//	GET    /v1/asks                       what runs wait on people for (asks.go); live with Accept: text/event-stream
//	GET    /v1/asks/live                  server-sent events: every ask that changes (the filters of GET /v1/asks)
//	POST   /v1/asks/{id}:answer           answer an ask {digest, value}: the first answer wins
//	GET    /v1/agents                     the live agent types: description, input and output schemas, worker count
//	GET    /v1/tools                      LLM tool definitions for them: ?format=openai (default), anthropic or mcp
//	POST   /v1/session                    {token}: keep a token in an HttpOnly cookie for the web UI
//	GET    /, /runs/{id}                  the web UI; / carries the first page of GET /v1/runs for its query
//	*      /mcp                           the MCP server (Config.MCP; internal/mcpserver), with a write token
//
// With tokens configured every /v1 call needs one ("Authorization: Bearer",
// or the session cookie): a read token for GETs, a write token for the rest.
// /healthz and the UI's static pages need none. With or without tokens, a
// Guard refuses DNS-rebinding and cross-site requests and writes whose body
// is not application/json.
//
// A guessed or malformed id never creates anything: only POST /v1/runs does.
package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/app/webui"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// MaxBodyBytes bounds request bodies.
const MaxBodyBytes = 1 << 20

// DefaultListLimit and MaxListLimit bound GET /v1/runs.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Config holds the API's dependencies.
type Config struct {
	Client *parent.Client
	View   *runview.View // run summaries for listing and live updates
	Conn   *nats.Conn    // for /healthz
	Logger *slog.Logger
	// Tokens maps bearer tokens to their roles. Empty: no authentication
	// (keep the API on loopback; CheckListenAddr).
	Tokens map[string]Role
	// Metrics, if set, serves GET /metrics (a read token when Tokens are
	// set).
	Metrics http.Handler
	// Addr is the listen address: a host name in it is an allowed Host
	// (Guard), as are AllowedHosts (names without port).
	Addr         string
	AllowedHosts []string
	// MaxTraceRuns bounds the runs of GET /v1/runs/{id}/trace; 0 means
	// MaxTraceRuns.
	MaxTraceRuns int
	// MCP, if set, serves MCPPath (the MCP server's streamable HTTP
	// transport), with a write token when Tokens are set.
	MCP http.Handler
	// Asks and AskView serve /v1/asks (asks.go): the asks store and its
	// index.
	Asks    *asks.Store
	AskView *asks.View
	// Limits, when set, serves /v1/limits (provider limits).
	Limits *limits.Store
}

type api struct {
	client *parent.Client
	view   *runview.View
	conn   *nats.Conn
	log    *slog.Logger
	logs   obs.Throttle // faults, per message and class
	probe  jetStreamProbe
	// maxTraceRuns bounds a trace (Config.MaxTraceRuns).
	maxTraceRuns int
	asks         *asks.Store
	askView      *asks.View
}

// fault logs a failed JetStream call at warn level, at most once per
// obs.DefaultLogEvery for each message and class of fault (jsfault): an
// outage met by many requests or viewers costs a bounded number of lines.
func (a *api) fault(ctx context.Context, msg string, err error, args ...any) {
	class := jsfault.Classify(ctx, err).String()
	a.logs.Log(ctx, a.log, slog.LevelWarn, msg+"/"+class, msg, append(args, "fault", class, "err", err)...)
}

// New returns the API's handler.
func New(cfg Config) http.Handler {
	a := &api{client: cfg.Client, view: cfg.View, conn: cfg.Conn, log: cfg.Logger, maxTraceRuns: cmp.Or(cfg.MaxTraceRuns, MaxTraceRuns),
		asks: cfg.Asks, askView: cfg.AskView}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.health)
	mux.HandleFunc("POST /v1/runs", a.dispatch)
	mux.HandleFunc("POST /v1/runs:batch", a.dispatchBatch)
	mux.HandleFunc("GET /v1/runs", a.list)
	mux.HandleFunc("GET /v1/runs/live", a.live)
	mux.HandleFunc("GET /v1/runs/{id}", a.get)
	mux.HandleFunc("GET /v1/runs/{id}/events", a.events)
	mux.HandleFunc("GET /v1/runs/{id}/trace", a.trace)
	mux.HandleFunc("POST /v1/runs/{id}", a.runAction) // {id}:rerun (rerun.go)
	mux.HandleFunc("GET /v1/runs/{id}/diff/{other}", a.diff)
	mux.HandleFunc("POST /v1/runs:rerun", a.rerunBatch)
	mux.HandleFunc("POST /v1/runs/{id}/cancel", a.cancel)
	mux.HandleFunc("POST /v1/runs/{id}/signals/{name}", a.signal)
	mux.HandleFunc("GET /v1/runs/{id}/calls", a.calls)
	mux.HandleFunc("POST /v1/runs/{id}/calls/{seq}/reply", a.reply)
	mux.HandleFunc("DELETE /v1/runs", a.clear)
	mux.HandleFunc("GET /v1/asks", a.askList)
	mux.HandleFunc("GET /v1/asks/live", a.askStream)
	mux.HandleFunc("POST /v1/asks/{action}", a.askAction)
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	mux.HandleFunc("GET /v1/agents", a.agents)
	mux.HandleFunc("GET /v1/tools", a.tools)
	a.mountLimits(mux, cfg.Limits)
	mountMCP(mux, cfg.MCP)
	tokens := newTokens(cfg.Tokens)
	mux.HandleFunc("POST /v1/session", tokens.session)
	mux.HandleFunc("DELETE /v1/session", tokens.session)
	mux.Handle("GET /", webui.Handler(webui.Config{Runs: tokens.guard(a.runsSnapshot), Logger: a.log}))
	return NewGuard(cfg.Addr, cfg.AllowedHosts).Wrap(probes(a, tokens.authorize(mux)))
}

// errorBody is every error response.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// runBody is a run row as the API answers it: the row, plus the rules the
// server applies to it as flags ("live": jetruntype.Run.Live, "final":
// events.Status.Final), so clients such as the web UI need not re-derive
// them from the status.
type runBody struct {
	*jetruntype.Run
	Live  bool `json:"live"`
	Final bool `json:"final"`
}

// runJSON returns row as the API answers it.
func runJSON(row *jetruntype.Run) runBody {
	return runBody{Run: row, Live: row.Live(), Final: row.Status.Final()}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: msg, Code: code})
}

// fail maps an error from the parent API to a response (errorStatus).
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code := a.errorStatus(r, err)
	writeError(w, status, code, err.Error())
}

func (a *api) health(w http.ResponseWriter, r *http.Request) {
	if a.conn == nil || !a.conn.IsConnected() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{
			"status": "unavailable", "nats": "disconnected", "reason": "not connected to NATS"})
		return
	}
	if err := a.probe.check(r.Context(), a.conn); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{
			"status": "degraded", "nats": "connected", "jetstream": "unavailable",
			"reason": "JetStream does not answer: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "nats": "connected", "jetstream": "ok"})
}

// probeEvery is how long the answer of a JetStream probe is reused, so
// health checks cost the server at most one request per interval.
const probeEvery = 2 * time.Second

// probeTimeout bounds one probe.
const probeTimeout = time.Second

// jetStreamProbe asks JetStream for the account's information (a cheap
// request that needs the JetStream API and, on a cluster, its meta leader)
// at most every probeEvery and remembers the answer.
type jetStreamProbe struct {
	mu   sync.Mutex
	at   time.Time
	last error
}

func (p *jetStreamProbe) check(ctx context.Context, nc *nats.Conn) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < probeEvery {
		return p.last
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	p.at, p.last = time.Now(), err
	return err
}

// dispatchBody is the body of POST /v1/runs.
type dispatchBody struct {
	AgentType        string           `json:"agentType"`
	RunID            string           `json:"runId"`
	Input            json.RawMessage  `json:"input"`
	Parent           string           `json:"parent"`
	ParentToolCallID string           `json:"parentToolCallId"`
	DisplayOrder     int              `json:"displayOrder"`
	Depth            int              `json:"depth"`
	Detached         *events.Detached `json:"detached"`
	MaxConcurrent    int              `json:"maxConcurrent"`
	ConcurrencyKey   string           `json:"concurrencyKey"`
	Strategy         events.Strategy  `json:"strategy"`
	DebounceMs       int64            `json:"debounceMs"`
	// Budget bounds the run's tree (events.TreeBudget).
	Budget *events.TreeBudget `json:"budget"`
	// Session makes the run a turn of a sub-agent session.
	Session string `json:"session"`
	Tenant  string `json:"tenant"`
	// Approval makes a nested run need a person's approval (approval.go).
	Approval *approvalBody `json:"approval"`
}

// outcomeBody is the response of POST /v1/runs?wait=true.
type outcomeBody struct {
	OK      bool            `json:"ok"`
	RunID   string          `json:"runId"`
	Status  events.Status   `json:"status"`
	Summary string          `json:"summary,omitempty"`
	Output  json.RawMessage `json:"output,omitempty"`
}

func (a *api) dispatch(w http.ResponseWriter, r *http.Request) {
	var body dispatchBody
	if !decodeBody(w, r, &body) {
		return
	}
	if len(body.Input) == 0 {
		writeError(w, http.StatusBadRequest, "bad_request", `"input" is required`)
		return
	}
	wait, err := boolParam(r, "wait")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	req := body.request(traceOf(r))
	if req.Approval, err = body.Approval.approval(); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	d, err := a.client.Dispatch(r.Context(), req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if d.Rejected != nil {
		writeRejected(w, req.RunID, d.Rejected)
		return
	}
	row := d.Run
	if !wait {
		status := http.StatusCreated
		if !d.Created {
			status = http.StatusOK // an existing run, re-attached
		}
		w.Header().Set("Location", "/v1/runs/"+row.ID)
		writeJSON(w, status, runJSON(row))
		return
	}
	// Waiting does not cancel the run when the client disconnects: a run is
	// cancelled only by POST /v1/runs/{id}/cancel.
	res, err := a.client.Await(r.Context(), row.ID)
	var f *parent.Failure
	if errors.As(err, &f) {
		writeJSON(w, http.StatusOK, f)
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, outcomeBody{OK: true, RunID: res.RunID, Status: events.StatusCompleted, Summary: res.Summary, Output: res.Output})
}

// statusParam parses ?status=a,b.
func statusParam(r *http.Request) ([]events.Status, error) {
	return wire.ParseStatuses(r.URL.Query().Get("status"))
}

func (a *api) clear(w http.ResponseWriter, r *http.Request) {
	statuses, err := statusParam(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	var f parent.ClearFilter
	f.Statuses = statuses
	if v := r.URL.Query().Get("olderThan"); v != "" {
		if f.OlderThan, err = time.ParseDuration(v); err != nil || f.OlderThan <= 0 {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("olderThan must be a positive duration like 24h, got %q", v))
			return
		}
	}
	if f.All, err = boolParam(r, "all"); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	n, err := a.client.Clear(r.Context(), f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"cleared": n})
}

// listFilter parses the query of GET /v1/runs; its errors are the client's.
func listFilter(r *http.Request) (runview.Filter, error) {
	statuses, err := statusParam(r)
	if err != nil {
		return runview.Filter{}, err
	}
	q := r.URL.Query()
	f := runview.Filter{Statuses: statuses, AgentType: q.Get("agentType"), Parent: q.Get("parent"),
		ParentToolCallID: q.Get("parentToolCallId"), IDContains: q.Get("q"), Cursor: q.Get("cursor"), Limit: DefaultListLimit,
		ForkedFrom: q.Get("forkedFrom")}
	if n := len(f.ParentToolCallID); n > events.MaxParentToolCallIDLength {
		return runview.Filter{}, fmt.Errorf("parentToolCallId is %d characters; the limit is %d", n, events.MaxParentToolCallIDLength)
	}
	if n := len(f.IDContains); n > events.MaxIDLength {
		return runview.Filter{}, fmt.Errorf("q (a part of a run id) is %d characters; a run id has at most %d", n, events.MaxIDLength)
	}
	if f.AgentType != "" {
		if err := events.ValidateToken("agent type", f.AgentType); err != nil {
			return runview.Filter{}, err
		}
	}
	if f.Parent != "" {
		if err := events.ValidateID(f.Parent); err != nil {
			return runview.Filter{}, err
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return runview.Filter{}, fmt.Errorf("limit must be 1 to %d, got %q", MaxListLimit, v)
		}
		f.Limit = n
	}
	return f, nil
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	f, err := listFilter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if err := a.view.Sync(r.Context()); err != nil {
		a.fail(w, r, err)
		return
	}
	page, err := a.view.List(f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// snapshotSyncTimeout bounds how long the web UI's page waits for the runs
// view to catch up before it embeds the list.
const snapshotSyncTimeout = 2 * time.Second

// runsSnapshot is the first page of the runs list the web UI's page at /
// embeds: what GET /v1/runs answers for the page's query. When the view
// cannot catch up in time it lists what it has: the page refetches the
// list as soon as its live stream opens.
func (a *api) runsSnapshot(r *http.Request) (any, error) {
	f, err := listFilter(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), snapshotSyncTimeout)
	defer cancel()
	if err := a.view.Sync(ctx); err != nil && r.Context().Err() == nil {
		a.log.WarnContext(r.Context(), "runs view behind; the page lists what it has", "err", err)
	}
	return a.view.List(f)
}

// signal sends a signal: POST /v1/runs/{id}/signals/{name}, the body being
// its JSON payload (empty means {}).
func (a *api) signal(w http.ResponseWriter, r *http.Request) {
	if err := events.ValidateToken("signal name", r.PathValue("name")); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if _, ok := a.row(w, r); !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, events.MaxSignalBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("signal payload exceeds %d bytes", events.MaxSignalBytes))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "bad_request", "read the signal payload: "+err.Error())
		return
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if !json.Valid(body) {
		writeError(w, http.StatusBadRequest, "bad_request", "signal payload is not valid JSON")
		return
	}
	seq, err := a.client.Signal(r.Context(), r.PathValue("id"), r.PathValue("name"), json.RawMessage(body))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]uint64{"seq": seq})
}

// row looks up the run named in the path; it answers 404 itself.
func (a *api) row(w http.ResponseWriter, r *http.Request) (*jetruntype.Run, bool) {
	id := r.PathValue("id")
	if events.ValidateID(id) != nil {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no run %q", id))
		return nil, false
	}
	row, err := a.client.Inspect(r.Context(), id)
	if errors.Is(err, parent.ErrRunNotFound) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no run %q", id))
		return nil, false
	}
	if err != nil {
		a.fail(w, r, err)
		return nil, false
	}
	return row, true
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	if row, ok := a.row(w, r); ok {
		writeJSON(w, http.StatusOK, runJSON(row))
	}
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 && !decodeBody(w, r, &body) {
		return
	}
	if _, ok := a.row(w, r); !ok {
		return
	}
	row, err := a.client.Cancel(r.Context(), r.PathValue("id"), body.Reason)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, runJSON(row))
}

// decodeBody reads a JSON object body into v, answering 400 or 413 itself.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body exceeds %d bytes", MaxBodyBytes))
			return false
		}
		writeError(w, http.StatusBadRequest, "bad_request", "body is not a valid JSON object: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad_request", "body has data after the JSON object")
		return false
	}
	return true
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s must be true or false, got %q", name, v)
	}
	return b, nil
}
