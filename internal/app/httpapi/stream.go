package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
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

// send writes one event; id "" means none.
func (s *sseWriter) send(id, event string, data any) error {
	payload, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if id != "" {
		if _, err := fmt.Fprintf(s.w, "id: %s\n", id); err != nil {
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
// Each event's id is its stream sequence ("<seq>.<part>" for a chunk of a
// coalesced chunk event but its last: see events.Event.Part), so a client
// that reconnects with Last-Event-ID resumes without gap or duplicate. "caught-up" follows the
// stored history; "end" closes the stream once the run ended, and
// "history-end" closes a follow=false stream of a run that goes on.
func (a *api) events(w http.ResponseWriter, r *http.Request) {
	row, ok := a.row(w, r)
	if !ok {
		return
	}
	from := position{part: -1}
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if v == "" {
			continue
		}
		p, err := parsePosition(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("event id %q is not a stream sequence", v))
			return
		}
		from = p
		break
	}
	after := from.after()
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
	// Replay resumes over transient faults itself (a server restart, a
	// leader election), after the last event it yielded: the stream stays
	// open without a gap or a duplicate.
	seq, err := a.client.Replay(ctx, row.ID, parent.ReplayOptions{After: after, Follow: mode})
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
		for ev, err := range seq {
			if err == nil && from.sent(ev) {
				continue // a Last-Event-ID amid a coalesced chunk event
			}
			select {
			case items <- item{ev: ev, err: err}:
			case <-ctx.Done():
				return
			}
		}
	})

	out := startSSE(w)
	ended := !row.Live() // the run had ended, or an event sent ends it
	caughtUp := last <= after
	if caughtUp {
		if out.send("", "caught-up", struct{}{}) != nil {
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
					_ = out.send("", "end", struct{}{})
				} else {
					_ = out.send("", "history-end", struct{}{}) // the run goes on
				}
				return
			}
			if it.err != nil {
				if ctx.Err() == nil {
					a.fault(ctx, "replay run events", it.err, "run_id", row.ID)
				}
				return
			}
			if out.send(positionOf(it.ev).String(), it.ev.Kind, it.ev) != nil {
				return
			}
			ended = ended || it.ev.Ends()
			if !caughtUp && it.ev.LastPart() && (it.ev.Pending == 0 || it.ev.Seq >= last) {
				caughtUp = true
				if out.send("", "caught-up", struct{}{}) != nil {
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
	if out.send("", "hello", struct{}{}) != nil {
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
				err = out.send("", "removed", map[string]string{"id": s.ID})
			} else {
				err = out.send("", "run", s)
			}
			if err != nil {
				return
			}
		}
	}
}

// position is where an event stream stands: after stream sequence seq, or,
// mid (part >= 0), after chunk part of the coalesced chunk event seq.
type position struct {
	seq  uint64
	part int // -1: the whole event at seq
}

// positionOf is the position just after ev.
func positionOf(ev events.Event) position {
	if ev.LastPart() {
		return position{seq: ev.Seq, part: -1}
	}
	return position{seq: ev.Seq, part: ev.Part}
}

// parsePosition reads an event id: "<seq>" or "<seq>.<part>".
func parsePosition(v string) (position, error) {
	s, p, mid := strings.Cut(v, ".")
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return position{}, err
	}
	if !mid {
		return position{seq: seq, part: -1}, nil
	}
	part, err := strconv.Atoi(p)
	if err != nil || part < 0 || seq == 0 {
		return position{}, fmt.Errorf("bad part in %q", v)
	}
	return position{seq: seq, part: part}, nil
}

// String is the event id of the position.
func (p position) String() string {
	if p.part < 0 {
		return strconv.FormatUint(p.seq, 10)
	}
	return strconv.FormatUint(p.seq, 10) + "." + strconv.Itoa(p.part)
}

// after is the stream sequence to replay after: the one before a
// coalesced event left midway.
func (p position) after() uint64 {
	if p.part >= 0 {
		return p.seq - 1
	}
	return p.seq
}

// sent reports whether ev lies at or before p (a replay resumed midway
// through a coalesced chunk event yields its first chunks again).
func (p position) sent(ev events.Event) bool {
	return p.part >= 0 && ev.Seq == p.seq && ev.Part <= p.part
}
