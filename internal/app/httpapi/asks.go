package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/events"
)

// Asks: what runs wait on people for (internal/engine/asks).
//
//	GET  /v1/asks              {"asks": [...], "total", "next"}: ?status=open (default), answered, closed or all;
//	                           agentType=, tree=, runId=, olderThan=, newerThan= (durations), limit=, cursor=;
//	                           with Accept: text/event-stream (or GET /v1/asks/live), the asks that change,
//	                           live ("ask" events)
//	POST /v1/asks/{id}:answer  {"digest", "value", "by"?}: 200 with the answered ask; 404 unknown ask;
//	                           409 answered already (naming who and when), stale digest (naming the current
//	                           one) or closed; 422 a value that does not fit (naming the field)

// DefaultAskLimit and MaxAskLimit bound a page of GET /v1/asks.
const (
	DefaultAskLimit = 100
	MaxAskLimit     = 1000
)

// askList answers GET /v1/asks from the asks index.
func (a *api) askList(w http.ResponseWriter, r *http.Request) {
	f, err := askFilter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if a.askView == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "this server keeps no asks index")
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		a.askLive(w, r, f)
		return
	}
	page, err := a.askView.List(f)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	writeAskPage(w, page)
}

// writeAskPage writes page as {"asks": [...], "total", "next"}, compact,
// each ask as the index encoded it when it changed.
func writeAskPage(w http.ResponseWriter, page asks.Page) {
	size := 64 + len(page.Next)
	for _, j := range page.JSON {
		size += len(j) + 1
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	buf.WriteString(`{"asks":[`)
	for i, j := range page.JSON {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(j)
	}
	next, _ := json.Marshal(page.Next)
	fmt.Fprintf(buf, `],"total":%d,"next":%s}`+"\n", page.Total, next)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// askStream serves GET /v1/asks/live: askLive whatever the Accept header.
func (a *api) askStream(w http.ResponseWriter, r *http.Request) {
	f, err := askFilter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if a.askView == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "this server keeps no asks index")
		return
	}
	a.askLive(w, r, f)
}

// askLive streams the asks f selects as they change: "hello", then an
// "ask" event per change (an ask that leaves the filter, answered say, is
// sent too, so a client drops it).
func (a *api) askLive(w http.ResponseWriter, r *http.Request, f asks.Filter) {
	changes, stop := a.askView.Subscribe()
	defer stop()
	out := startSSE(w)
	if out.send("", "hello", struct{}{}) != nil {
		return
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	f.Status = "" // every change is sent: an ask answered leaves an open list
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			if out.comment("keep-alive") != nil {
				return
			}
		case change, open := <-changes:
			if !open {
				return // shutting down: the client reconnects
			}
			if !f.Keep(change.Ask, time.Now()) {
				continue
			}
			if out.send("", "ask", change.JSON) != nil {
				return
			}
		}
	}
}

// askFilter reads GET /v1/asks's query.
func askFilter(r *http.Request) (asks.Filter, error) {
	q := r.URL.Query()
	f := asks.Filter{Status: q.Get("status"), AgentType: q.Get("agentType"), Tree: q.Get("tree"), RunID: q.Get("runId"),
		Cursor: q.Get("cursor"), Limit: DefaultAskLimit}
	switch f.Status {
	case "":
		f.Status = events.AskOpen
	case "all":
		f.Status = ""
	case events.AskOpen, events.AskAnswered, events.AskClosed:
	default:
		return f, fmt.Errorf("status must be open, answered, closed or all, got %q", f.Status)
	}
	var err error
	for name, d := range map[string]*time.Duration{"olderThan": &f.OlderThan, "newerThan": &f.NewerThan} {
		if v := q.Get(name); v != "" {
			if *d, err = time.ParseDuration(v); err != nil || *d < 0 {
				return f, fmt.Errorf("%s must be a duration such as 10m, got %q", name, v)
			}
		}
	}
	if v := q.Get("limit"); v != "" {
		if f.Limit, err = strconv.Atoi(v); err != nil || f.Limit < 1 || f.Limit > MaxAskLimit {
			return f, fmt.Errorf("limit must be 1 to %d, got %q", MaxAskLimit, v)
		}
	}
	return f, nil
}

// askErrorBody is an ask's error: the API's error shape with what the
// caller needs to decide again (the ask as it is, the field at fault).
type askErrorBody struct {
	errorBody
	Field      string      `json:"field,omitempty"`
	Digest     string      `json:"digest,omitempty"`
	AnsweredBy string      `json:"answeredBy,omitempty"`
	AnsweredAt *time.Time  `json:"answeredAt,omitempty"`
	Ask        *events.Ask `json:"ask,omitempty"`
}

// askAction serves POST /v1/asks/{id}:answer.
func (a *api) askAction(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutSuffix(r.PathValue("action"), ":answer")
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such route: POST /v1/asks/{id}:answer answers an ask")
		return
	}
	if a.asks == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "this server has no asks store")
		return
	}
	var body struct {
		Digest string          `json:"digest"`
		Value  json.RawMessage `json:"value"`
		By     string          `json:"by"`
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, events.MaxCallBytes+1024))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("answer exceeds %d bytes", events.MaxCallBytes))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "bad_request", "read the answer: "+err.Error())
		return
	}
	if err := json.Unmarshal(data, &body); err != nil || body.Digest == "" || len(bytes.TrimSpace(body.Value)) == 0 {
		writeError(w, http.StatusBadRequest, "bad_request", `an answer is a JSON object {"digest": "<the ask's digest>", "value": <the answer>}`)
		return
	}
	answered, err := a.asks.Answer(r.Context(), id, body.Digest, body.Value, answerer(r, body.By))
	if err != nil {
		a.askFail(w, r, err)
		return
	}
	// The answer is stored: it reaches the run now, or, if this fails or
	// the process dies first, by the asks keeper (at its next sweep).
	if delivered, err := a.asks.Deliver(r.Context(), answered); err != nil {
		a.log.WarnContext(r.Context(), "deliver an answer; the asks keeper delivers it later", "ask_id", id, "err", err)
	} else {
		answered = delivered
	}
	writeJSON(w, http.StatusOK, answered)
}

// askFail maps an error of asks.Store.Answer to a response.
func (a *api) askFail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		conflict *asks.Conflict
		bad      *asks.ValueError
	)
	switch {
	case errors.Is(err, asks.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.As(err, &conflict):
		b := askErrorBody{errorBody: errorBody{Error: conflict.Error()}, Digest: conflict.Ask.Digest, Ask: conflict.Ask}
		switch {
		case errors.Is(err, asks.ErrAnswered):
			b.Code = "already_answered"
			if ans := conflict.Ask.Answer; ans != nil {
				b.AnsweredBy, b.AnsweredAt = ans.By, &ans.At
			}
		case errors.Is(err, asks.ErrStale):
			b.Code = "stale_digest"
		default:
			b.Code = "ask_closed"
		}
		writeJSON(w, http.StatusConflict, b)
	case errors.As(err, &bad):
		writeJSON(w, http.StatusUnprocessableEntity, askErrorBody{errorBody: errorBody{Error: bad.Error(), Code: "invalid_answer"}, Field: bad.Field})
	default:
		a.fail(w, r, err)
	}
}

// answerer names who answers: the caller's own name (the body's "by"),
// and the token it used, by a digest that does not reveal it.
func answerer(r *http.Request, by string) string {
	by = strings.TrimSpace(by)
	if len(by) > 128 {
		by = by[:128]
	}
	tok := callerToken(r.Context())
	switch {
	case by != "" && tok != "":
		return by + " (" + tok + ")"
	case tok != "":
		return tok
	case by != "":
		return by
	}
	return "api"
}

// callerTokenKey is the context key of the name of the token a request
// came with.
type callerTokenKey struct{}

// withCallerToken records the token of a request by its name: "token "
// and the first 8 hex digits of its sha256 (the token itself is never
// shown).
func withCallerToken(ctx context.Context, tok string) context.Context {
	sum := sha256.Sum256([]byte(tok))
	return context.WithValue(ctx, callerTokenKey{}, "token "+hex.EncodeToString(sum[:4]))
}

// callerToken is the name of the request's token, "" without one.
func callerToken(ctx context.Context) string {
	s, _ := ctx.Value(callerTokenKey{}).(string)
	return s
}
