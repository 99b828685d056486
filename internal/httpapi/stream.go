package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jsfault"
)

// keepAlive is how often an idle event stream sends a comment, so proxies
// keep it open.
const keepAlive = 15 * time.Second

// sseWriter writes server-sent events.
type sseWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	s.flush()
	return s
}

// send writes one event; id 0 means none.
func (s *sseWriter) send(id uint64, event string, data any) error {
	payload, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if id > 0 {
		if _, err := fmt.Fprintf(s.w, "id: %d\n", id); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, payload); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseWriter) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseWriter) flush() error { return s.rc.Flush() }

// events streams a run's events: GET /v1/runs/{id}/events?after=N&follow=bool.
// Each event's id is its stream sequence, so a client that reconnects with
// Last-Event-ID resumes without gap or duplicate. "caught-up" follows the
// stored history; "end" closes the stream once the run ended, and
// "history-end" closes a follow=false stream of a run that goes on.
func (a *api) events(w http.ResponseWriter, r *http.Request) {
	row, ok := a.row(w, r)
	if !ok {
		return
	}
	var after uint64
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("event id %q is not a stream sequence", v))
			return
		}
		after = n
		break
	}
	follow := true
	if v := r.URL.Query().Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("follow must be true or false, got %q", v))
			return
		}
		follow = b
	}
	mode := events.UntilEnd
	if !follow {
		mode = events.HistoryOnly
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	last, err := a.client.LastEventSeq(ctx, row.ID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	seq, err := a.client.Replay(ctx, row.ID, after, mode)
	if err != nil {
		a.fail(w, r, err)
		return
	}

	type item struct {
		ev  events.Event
		err error
	}
	items := make(chan item)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		defer close(items)
		// A replay that fails on a transient fault (JetStream away, a leader
		// election) is resumed after the last event sent, with backoff and
		// throttled logs: the client's stream stays open, without a gap or a
		// duplicate, and an outage costs neither a hot loop nor a log line
		// per viewer and try.
		bo := jsfault.NewBackOff(0)
		from := after
		for {
			var failed error
			for ev, err := range seq {
				if err != nil {
					failed = err
					break
				}
				select {
				case items <- item{ev: ev}:
				case <-ctx.Done():
					return
				}
				from = ev.Seq
				bo.Reset()
			}
			if failed == nil {
				return // the replay ended
			}
			for {
				if ctx.Err() != nil || !jsfault.IsTransient(ctx, failed) {
					select {
					case items <- item{err: failed}:
					case <-ctx.Done():
					}
					return
				}
				a.fault(ctx, "replay run events; resuming", failed, "run_id", row.ID)
				if jsfault.Sleep(ctx, bo.NextBackOff()) != nil {
					return
				}
				if seq, failed = a.client.Replay(ctx, row.ID, from, mode); failed == nil {
					break
				}
			}
		}
	})

	out := startSSE(w)
	ended := !row.Live() // the run had ended, or an event sent ends it
	caughtUp := last <= after
	if caughtUp {
		if out.send(0, "caught-up", struct{}{}) != nil {
			return
		}
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if out.comment("keep-alive") != nil {
				return
			}
		case it, open := <-items:
			if !open {
				if mode == events.UntilEnd || ended {
					_ = out.send(0, "end", struct{}{})
				} else {
					_ = out.send(0, "history-end", struct{}{}) // the run goes on
				}
				return
			}
			if it.err != nil {
				if ctx.Err() == nil {
					a.fault(ctx, "replay run events", it.err, "run_id", row.ID)
				}
				return
			}
			if out.send(it.ev.Seq, it.ev.Kind, it.ev) != nil {
				return
			}
			ended = ended || it.ev.Ends()
			if !caughtUp && (it.ev.Pending == 0 || it.ev.Seq >= last) {
				caughtUp = true
				if out.send(0, "caught-up", struct{}{}) != nil {
					return
				}
			}
		}
	}
}

// live streams every run row change: GET /v1/runs/live. Each change is an
// event "run" with the run's summary, or "removed" with {"id"} for a run
// that was cleared.
func (a *api) live(w http.ResponseWriter, r *http.Request) {
	changes, stop := a.view.Subscribe()
	defer stop()
	out := startSSE(w)
	if out.send(0, "hello", struct{}{}) != nil {
		return
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			if out.comment("keep-alive") != nil {
				return
			}
		case s, open := <-changes:
			if !open {
				return // fell behind, or shutting down: the client reconnects
			}
			var err error
			if s.Removed {
				err = out.send(0, "removed", map[string]string{"id": s.ID})
			} else {
				err = out.send(0, "run", s)
			}
			if err != nil {
				return
			}
		}
	}
}
