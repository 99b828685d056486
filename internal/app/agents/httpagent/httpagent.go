// Package httpagent is the built-in "http" agent type: it hands each run to
// an HTTP service (any language) and maps the service's answer onto the run.
//
// For an attempt the worker POSTs the run as JSON (eventline.Request:
// runId, agentType, attempt, input, milestones already reached, steps
// already stored, parent, parentToolCallId, depth) and reads the response, status 2xx, as
// newline-delimited JSON events (package eventline). The response ends with
// a result or error line. A wait line ends the response too: the worker
// parks the run until the signal arrives (worker.Run.Wait: durable, the
// concurrency slot lent out meanwhile), then POSTs the same request to the
// same URL with "signal": {"name", "payload"} and the milestones reached and
// steps stored so far; that response continues the run.
//
// Outcomes: a cancel, a lease loss or a shutdown aborts the request (the
// worker then aborts, abandons or hands back the run). A connection that
// fails or drops, a silence longer than Timeout, a status 5xx, 408 or 429,
// and a response that ends without a result or error line end the attempt
// with a retryable error: the run is tried again as a new attempt with its
// milestones, up to the worker's MaxAttempts. Any other non-2xx status ends
// the run "error" with the status and the start of the body. A line that
// breaks the format ends the run "error" with its line number and reason.
package httpagent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Defaults used where Config leaves a field zero.
const (
	DefaultTimeout = 30 * time.Second
	DefaultMaxLine = 1 << 20
)

// ContentType is the media type of a response (not checked: any 2xx body
// is read as lines).
const ContentType = "application/x-ndjson"

// Config configures one http agent type.
type Config struct {
	// URL receives the POSTs (http or https).
	URL string
	// Token, when set, is sent as "Authorization: Bearer <Token>". It is
	// never logged.
	Token string
	// Timeout bounds connecting and waiting for the response headers, and
	// the silence between two lines of a response (default 30s). A run
	// that works longer between events sends progress meanwhile.
	Timeout time.Duration
	// MaxLine bounds one response line in bytes (default 1 MiB).
	MaxLine int
	// Client sends the requests (default: a client without an overall
	// timeout; Timeout applies).
	Client *http.Client
}

// Validate checks the URL.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", c.URL)
	}
	if c.Timeout < 0 || c.MaxLine < 0 {
		return errors.New("timeout and max line must not be negative")
	}
	return nil
}

// Handler returns the handler of an http agent type.
func Handler(cfg Config) worker.Handler {
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.MaxLine = cmp.Or(cfg.MaxLine, DefaultMaxLine)
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	where := cfg.URL
	if u, err := url.Parse(cfg.URL); err == nil {
		where = u.Redacted()
	}
	return &handler{cfg: cfg, where: where}
}

type handler struct {
	cfg   Config
	where string // the URL without credentials, for errors
}

// errSilent is the cause when a response stays silent past Timeout.
var errSilent = errors.New("silent")

func (h *handler) ServeRun(ctx context.Context, run *worker.Run) (worker.Result, error) {
	req, err := eventline.NewRequest(ctx, run)
	if err != nil {
		return worker.Result{}, err
	}
	for {
		res, pause, err := h.post(ctx, run, req)
		if err != nil || pause == nil {
			return res, err
		}
		req.Signal, req.Reply, req.Reserved = nil, nil, nil
		switch pause.Kind {
		case eventline.KindCall:
			reply, err := eventline.DoCall(ctx, run, *pause)
			if err != nil {
				return worker.Result{}, err
			}
			req.Reply = &reply
		case eventline.KindReserve:
			answer, err := eventline.DoReserve(ctx, run, *pause)
			if err != nil {
				return worker.Result{}, err
			}
			req.Reserved = &answer
		default:
			payload, err := run.Wait(ctx, pause.Wait, pause.Ask...)
			if err != nil {
				return worker.Result{}, err
			}
			req.Signal = &eventline.Signal{Name: pause.Wait, Payload: payload}
		}
		req.Milestones = eventline.Milestones(run)
		if req.Steps, err = eventline.Steps(ctx, run); err != nil {
			return worker.Result{}, err
		}
	}
}

// post sends one request and applies its response's events. It returns the
// run's result, or the wait or call line that pauses the run, or the error
// that ends the attempt.
func (h *handler) post(ctx context.Context, run *worker.Run, body eventline.Request) (worker.Result, *eventline.Event, error) {
	var wait time.Duration // how long the service asked to be left alone (Retry-After); 0: the worker's delay
	fail := func(retry bool, format string, args ...any) (worker.Result, *eventline.Event, error) {
		if ctx.Err() != nil { // cancel, shutdown or lease loss: the worker knows which
			return worker.Result{}, nil, context.Cause(ctx)
		}
		err := fmt.Errorf("http agent: POST %s: "+format, append([]any{h.where}, args...)...)
		if retry {
			err = jetruntype.RetryAfter(err, wait)
		}
		return worker.Result{}, nil, err
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return fail(false, "encode the request: %v", err)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	silence := time.AfterFunc(h.cfg.Timeout, func() { cancel(errSilent) })
	defer silence.Stop()

	req, err := http.NewRequestWithContext(rctx, http.MethodPost, h.cfg.URL, bytes.NewReader(raw))
	if err != nil {
		return fail(false, "%v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", ContentType)
	if h.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.cfg.Token)
	}
	if tc := worker.TraceContext(ctx); !tc.IsZero() { // the service joins the run's trace
		req.Header.Set(events.HeaderTraceParent, tc.TraceParent)
		if tc.TraceState != "" {
			req.Header.Set(events.HeaderTraceState, tc.TraceState)
		}
	}
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		if errors.Is(context.Cause(rctx), errSilent) {
			return fail(true, "no response within %s", h.cfg.Timeout)
		}
		return fail(true, "%v", unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		retry := resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout
		wait = retryAfter(resp.Header, time.Now())
		return fail(retry, "status %s: %s", resp.Status, strings.TrimSpace(string(text)))
	}
	silence.Reset(h.cfg.Timeout)

	lr := eventline.NewReader(resp.Body, h.cfg.MaxLine)
	ap := eventline.NewApplier(run)
	defer func() { _ = ap.Close(ctx) }() // what a failed response left held still counts
	n := 0
	for {
		line, err := lr.Next()
		switch {
		case errors.Is(err, io.EOF):
			return fail(true, "the response ended after line %d without a result or error line", n)
		case errors.Is(err, eventline.ErrTooLong):
			return fail(false, "response line %d is longer than %d bytes", n+1, h.cfg.MaxLine)
		case errors.Is(context.Cause(rctx), errSilent):
			return fail(true, "no response line for %s after line %d", h.cfg.Timeout, n)
		case err != nil:
			return fail(true, "connection lost after response line %d: %v", n, err)
		}
		n++
		silence.Reset(h.cfg.Timeout)
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ev, err := eventline.Parse(n, line)
		if err != nil {
			return fail(false, "response %v", err)
		}
		switch ev.Kind {
		case eventline.KindWait, eventline.KindCall, eventline.KindReserve, eventline.KindResult, eventline.KindError:
			// A usage line is the step's only when the step line follows it.
			if err := ap.Close(ctx); err != nil {
				return worker.Result{}, nil, err
			}
		}
		switch ev.Kind {
		case eventline.KindWait, eventline.KindCall, eventline.KindReserve:
			return worker.Result{}, &ev, nil
		case eventline.KindResult:
			return ev.Result, nil, nil
		case eventline.KindError:
			return worker.Result{}, nil, eventline.Failure(ev)
		}
		if err := ap.Apply(ctx, ev); err != nil {
			if ctx.Err() != nil || errors.Is(err, worker.ErrLeaseLost) {
				return worker.Result{}, nil, err
			}
			return fail(false, "response line %d: %v", n, err)
		}
	}
}

// unwrapURLError drops the method and URL net/http puts in front of a
// transport error (fail names them once).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// maxRetryAfter bounds the wait a response's Retry-After header can ask
// for before the next attempt.
const maxRetryAfter = time.Hour

// retryAfter is the wait a retryable response's Retry-After header asks for
// (RFC 9110: seconds, or an HTTP date), at most maxRetryAfter; 0, the
// worker's growing delay, when it is absent, unreadable or past.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		d = time.Duration(min(max(secs, 0), int64(maxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}
