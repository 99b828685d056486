package finish

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Webhook returns a Handler that POSTs the finish as JSON to url, with
// headers Idempotency-Key (<runId>.<status>), Jetrun-Run-Id and
// Jetrun-Status, and the run's W3C traceparent and tracestate if it has
// them. A 2xx answer means delivered; anything else is a failed attempt:
//
//   - 429 or 503 with a Retry-After header (seconds or an HTTP date) is
//     retried after that delay (jetruntype.RetryAfter), at most
//     MaxRetryAfter; without one, with the deliverer's backoff;
//   - any other 4xx except 408, 409 and 425 is permanent
//     (jetruntype.Cancel): the finish is dead-lettered at once with the
//     status and the start of the answer's body as the reason;
//   - the rest (5xx, 408, 409, 425, no answer) is retried with backoff.
//
// client nil means a client with no timeout of its own (the deliverer's
// Timeout applies). The handler is also a MilestoneHandler: it POSTs
// milestone notices to the same url (see webhook.ServeMilestone).
func Webhook(url string, client *http.Client) Handler {
	if client == nil {
		client = &http.Client{}
	}
	return webhook{url: url, client: client}
}

// webhook is the Handler Webhook returns.
type webhook struct {
	url    string
	client *http.Client
}

// ServeFinish POSTs the finish.
func (w webhook) ServeFinish(ctx context.Context, run *jetruntype.Run, res Result) error {
	return w.post(ctx, res, withTrace(run, map[string]string{
		"Idempotency-Key": IdempotencyKey(res),
		"Jetrun-Run-Id":   res.RunID,
		"Jetrun-Status":   string(res.Status),
	}))
}

// withTrace adds the run's W3C trace context to headers.
func withTrace(run *jetruntype.Run, headers map[string]string) map[string]string {
	if run == nil {
		return headers
	}
	if tc := (events.TraceContext{TraceParent: run.TraceParent, TraceState: run.TraceState}).Valid(); !tc.IsZero() {
		headers[events.HeaderTraceParent] = tc.TraceParent
		if tc.TraceState != "" {
			headers[events.HeaderTraceState] = tc.TraceState
		}
	}
	return headers
}

// ServeMilestone POSTs a milestone notice, with headers Idempotency-Key
// (<runId>.milestone.<name>), Jetrun-Kind (milestone), Jetrun-Run-Id and
// Jetrun-Milestone.
func (w webhook) ServeMilestone(ctx context.Context, run *jetruntype.Run, n Notice) error {
	return w.post(ctx, n, withTrace(run, map[string]string{
		"Idempotency-Key":  NoticeIdempotencyKey(n),
		events.HeaderKind:  events.KindMilestoneNotice,
		"Jetrun-Run-Id":    n.RunID,
		"Jetrun-Milestone": n.Milestone.Name,
	}))
}

func (w webhook) post(ctx context.Context, v any, headers map[string]string) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", w.url, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("webhook %s answered %s: %s", w.url, resp.Status, bytes.TrimSpace(snippet))
	return answerError(err, resp, time.Now())
}

// MaxRetryAfter bounds the wait a webhook's Retry-After asks for.
const MaxRetryAfter = time.Hour

// answerError marks err, a webhook's answer resp that is not a 2xx, as
// retried after its Retry-After (429, 503), permanent (a 4xx no retry can
// fix), or retried with backoff.
func answerError(err error, resp *http.Response, now time.Time) error {
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		return jetruntype.RetryAfter(err, retryAfter(resp.Header.Get("Retry-After"), now))
	case code == http.StatusRequestTimeout || code == http.StatusConflict || code == http.StatusTooEarly:
		return err
	case code/100 == 4:
		return jetruntype.Cancel(fmt.Errorf("%w (a 4xx other than 408, 409, 425 and 429 is not retried)", err))
	}
	return err
}

// retryAfter is the wait a Retry-After header value asks for, as of now:
// delay-seconds or an HTTP date, at most MaxRetryAfter; 0 (the deliverer's
// backoff) when it is absent, malformed or already past.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		d = time.Duration(min(secs, int64(MaxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), MaxRetryAfter)
}
