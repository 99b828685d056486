// Package runview keeps an in-memory summary of every run row, fed by one
// watch of the rows (pkg/kv, the read-only face a viewer uses), for the
// HTTP API's listing and live updates: a list request or a UI refresh costs
// nothing on the server, and every viewer shares the one watch.
package runview

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/kv"
)

// maxText bounds the error and summary texts kept in a Summary.
const maxText = 500

// syncTimeout bounds how long Sync waits for the watch to catch up.
const syncTimeout = 5 * time.Second

// Summary is a run row without what a list does not show (input, output,
// the delivery ledgers, merged runs), its texts clipped, and the flags
// the UI reads instead of deriving them.
type Summary struct {
	*jetruntype.Run
	// Notified counts the milestone notices delivered (see Run.Notices).
	Notified int `json:"notified,omitempty"`
	// Live reports Run.Live: the run may still be executing (and can be
	// cancelled).
	Live bool `json:"live"`
	// Final reports Run.Final: the row never changes status again.
	Final bool `json:"final"`
	// Removed marks a change event for a run that was cleared.
	Removed bool `json:"removed,omitempty"`
}

// latestView reads a run's row as its last write left it (on the stream's
// leader), as a reader sees it.
func latestView(rt *engine.Runtime) func(ctx context.Context, id string) (*jetruntype.Run, uint64, error) {
	return func(ctx context.Context, id string) (*jetruntype.Run, uint64, error) {
		row, rev, err := rt.Store().Latest(ctx, id)
		return row.View(), rev, err
	}
}

// Summarize returns r's summary (r is not changed).
func Summarize(r *jetruntype.Run) Summary {
	c := *r
	c.Input, c.Output = nil, nil
	c.Error, c.Summary = clip(r.Error), clip(r.Summary)
	c.Finishes, c.Notices, c.Merged = nil, nil, nil
	if f := r.ForkedFrom; f != nil { // where from, not the steps given
		c.ForkedFrom = &jetruntype.Fork{RunID: f.RunID, Step: f.Step}
	}
	return Summary{Run: &c, Notified: notified(r), Live: r.Live(), Final: r.Final()}
}

// notified counts r's milestone notices delivered.
func notified(r *jetruntype.Run) int {
	n := 0
	for _, s := range r.Notices {
		if !s.DeliveredAt.IsZero() {
			n++
		}
	}
	return n
}

func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	return s[:maxText] + "…"
}

// View is the in-memory summary of every run. Create it with Start; stop it
// with Stop.
type View struct {
	rows *kv.Runs
	// lastRevision is the runs bucket's newest revision (Sync's target):
	// the one read the face does not offer.
	lastRevision func(ctx context.Context) (uint64, error)
	// latest reads a run's row from the runs stream's leader (Vouch's
	// read, ledger.go), with its revision.
	latest func(ctx context.Context, id string) (*jetruntype.Run, uint64, error)
	log    *slog.Logger

	mu      sync.RWMutex
	stopped bool // no more subscriptions
	runs    map[string]Summary
	ledgers map[string]*ledger // the finishes each run's transitions recorded (ledger.go)
	// seen is, per run, the revision of the newest row (or removal) the
	// view took in: Vouch waits for the row the bucket's leader has.
	seen    map[string]uint64
	lastRev uint64
	subs    map[chan Summary]struct{}
	changed *sync.Cond // signalled when the view takes in a change

	cancel context.CancelFunc
	done   chan struct{}
	logs   obs.Throttle // watch faults, per message and class

	// unfinalized, if set, is called (from the watch's goroutine) with
	// the id of a run whose final row left its final status or changed
	// its ending (status, reason, error, attempt): jetrun never does
	// that, so someone rewrote the row.
	unfinalized func(ctx context.Context, id string)
}

// Start loads every row of rt (ctx bounds the load) and follows them until
// Stop.
func Start(ctx context.Context, rt *jetrun.Runtime, logger *slog.Logger) (*View, error) {
	return StartGuard(ctx, rt, logger, nil)
}

// StartGuard is Start with a guard: unfinalized (when not nil) is called,
// from the watch's goroutine, with the id of every run whose row it saw
// leave a final status (completed, error, aborted) or change its ending
// while final, live or when it reloads after a broken watch. jetrun never
// does that: the row was rewritten by someone who may write the bucket
// (engine.Runtime.RepairFinal restores it).
func StartGuard(ctx context.Context, rt *jetrun.Runtime, logger *slog.Logger, unfinalized func(ctx context.Context, id string)) (*View, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	v := &View{
		rows: kv.New(rt), lastRevision: engine.From(rt).Store().LastRevision, latest: latestView(engine.From(rt)),
		log: logger, runs: make(map[string]Summary), ledgers: make(map[string]*ledger), seen: make(map[string]uint64),
		subs: make(map[chan Summary]struct{}), cancel: cancel, done: make(chan struct{}),
		unfinalized: unfinalized,
	}
	v.changed = sync.NewCond(&v.mu)
	ready := make(chan error, 1)
	go v.loop(wctx, ready)
	select {
	case err := <-ready:
		if err != nil {
			v.Stop()
			return nil, err
		}
		return v, nil
	case <-ctx.Done():
		v.Stop()
		return nil, fmt.Errorf("runview: load runs: %w", ctx.Err())
	}
}

// Stop ends the watch and closes every subscription. It is idempotent.
func (v *View) Stop() {
	v.cancel()
	<-v.done
}

func (v *View) loop(ctx context.Context, ready chan<- error) {
	defer close(v.done)
	defer func() {
		v.mu.Lock()
		v.stopped = true
		v.mu.Unlock()
		v.closeSubs()
	}()
	first := true
	bo := jsfault.NewBackOff(rewatchPause) // reset by a watch that loads
	for ctx.Err() == nil {
		// Everything written up to here is in the initial state, even a
		// revision the watch never shows (an expired marker).
		baseline, err := v.lastSeq(ctx)
		if err != nil {
			if first {
				ready <- fmt.Errorf("runview: watch runs: %w", err)
				return
			}
			v.fault(ctx, "watch runs; retrying", err)
			_ = jsfault.Sleep(ctx, bo.NextBackOff())
			continue
		}
		// The initial state is taken in whole at the Loaded marker: until
		// then the view answers (and Sync and Vouch wait) with what it had.
		initial := make(map[string]Summary)
		ledgers := make(map[string]*ledger)
		seen := make(map[string]uint64)
		var loadedRev uint64
		loading, watched := true, false
		broken := errors.New("watch closed")
		for c, err := range v.rows.Watch(ctx, kv.WatchOptions{}) {
			if err != nil {
				if first && !watched { // the watch could not start
					ready <- fmt.Errorf("runview: %w", err)
					return
				}
				broken = err
				break // reload below
			}
			watched = true
			if c.Loaded { // the initial state is complete
				bo.Reset()
				v.mu.Lock()
				var left []string // final rows rewritten while the watch was broken
				for id, s := range initial {
					if old, ok := v.runs[id]; ok && rewritten(old, s) {
						left = append(left, id)
					}
				}
				v.runs, v.ledgers, v.seen, loading = initial, ledgers, seen, false
				v.lastRev = max(v.lastRev, baseline, loadedRev)
				v.changed.Broadcast()
				v.mu.Unlock()
				if first {
					first = false
					ready <- nil
				}
				for _, id := range left {
					v.unfinalize(ctx, id)
				}
				continue
			}
			var s Summary
			if c.Run != nil {
				s = Summarize(c.Run)
			}
			if loading {
				if c.Run != nil {
					initial[s.ID] = s
					if l := v.reloaded(c.ID, c.Run, ledgers[c.ID]); l != nil {
						ledgers[c.ID] = l
					}
				} else {
					delete(initial, c.ID)
					delete(ledgers, c.ID)
				}
				seen[c.ID] = c.Revision
				loadedRev = max(loadedRev, c.Revision)
				continue
			}
			v.apply(ctx, c.ID, s, c.Run, c.Revision)
		}
		// Broken: reload everything, and make live subscribers reload too.
		v.closeSubs()
		if ctx.Err() == nil {
			v.fault(ctx, "runs watch ended; reloading", broken)
			_ = jsfault.Sleep(ctx, bo.NextBackOff())
		}
	}
}

// rewatchPause is the longest pause between two tries to watch the runs.
const rewatchPause = 5 * time.Second

// fault logs a failed watch at warn level, at most once per
// obs.DefaultLogEvery for each message and class of fault.
func (v *View) fault(ctx context.Context, msg string, err error) {
	class := jsfault.Classify(ctx, err).String()
	v.logs.Log(ctx, v.log, slog.LevelWarn, msg+"/"+class, msg, "fault", class, "err", err)
}

// lastSeq is the runs bucket's newest revision.
func (v *View) lastSeq(ctx context.Context) (uint64, error) {
	rev, err := v.lastRevision(ctx)
	if err != nil {
		return 0, fmt.Errorf("runview: %w", err)
	}
	return rev, nil
}

// rewritten reports whether a row whose summary was old and is now s was
// rewritten outside jetrun: it was final, and it left its final status or
// changed its ending.
func rewritten(old, s Summary) bool {
	if !old.Final {
		return false
	}
	return !s.Final || s.Status != old.Status || s.Reason != old.Reason || s.Error != old.Error || s.Attempt != old.Attempt
}

// apply records a change (row r, nil when the run was removed) and tells
// the subscribers.
func (v *View) apply(ctx context.Context, id string, s Summary, r *jetruntype.Run, rev uint64) {
	present := r != nil
	v.mu.Lock()
	old, had := v.runs[id]
	left := present && had && rewritten(old, s)
	if rev > v.seen[id] { // not older than a row Vouch took from the leader
		v.noteLocked(id, r)
		v.seen[id] = rev
	}
	if present {
		v.runs[id] = s
	} else {
		delete(v.runs, id)
		s = Summary{Run: &jetruntype.Run{ID: id}, Removed: true}
	}
	v.lastRev = max(v.lastRev, rev)
	v.changed.Broadcast()
	for ch := range v.subs {
		select {
		case ch <- s:
		default: // a subscriber that cannot keep up is dropped; it reconnects and reloads
			delete(v.subs, ch)
			close(ch)
		}
	}
	v.mu.Unlock()
	if left {
		v.unfinalize(ctx, id)
	}
}

// unfinalize calls the guard for run id, if there is one.
func (v *View) unfinalize(ctx context.Context, id string) {
	if v.unfinalized != nil {
		v.unfinalized(ctx, id)
	}
}

func (v *View) closeSubs() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for ch := range v.subs {
		close(ch)
	}
	v.subs = map[chan Summary]struct{}{}
	v.changed.Broadcast()
}

// Subscribe returns a channel of changes (a Summary with Removed set for a
// cleared run) and a function that ends the subscription. The channel is
// closed if the subscriber falls behind or the view stops.
func (v *View) Subscribe() (<-chan Summary, func()) {
	ch := make(chan Summary, 256)
	v.mu.Lock()
	if v.stopped { // nothing will come
		v.mu.Unlock()
		close(ch)
		return ch, func() {}
	}
	v.subs[ch] = struct{}{}
	v.mu.Unlock()
	return ch, func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if _, ok := v.subs[ch]; ok {
			delete(v.subs, ch)
			close(ch)
		}
	}
}

// Sync waits until the view reflects every write made to the bucket before
// the call, so a client lists what it just wrote.
func (v *View) Sync(ctx context.Context) error {
	target, err := v.lastSeq(ctx)
	if err != nil {
		return err
	}
	if !v.await(ctx, func() bool { return v.lastRev >= target }) {
		return cmp.Or(ctx.Err(), errors.New("runview: sync: the runs watch is behind"))
	}
	return nil
}

// await waits until done (called with v.mu held) reports true, for at
// most syncTimeout, and says whether it did: false when the view did not
// get there in time or ctx ended.
func (v *View) await(ctx context.Context, done func() bool) bool {
	deadline := time.Now().Add(syncTimeout)
	stop := context.AfterFunc(ctx, func() {
		v.mu.Lock()
		v.changed.Broadcast()
		v.mu.Unlock()
	})
	defer stop()
	timer := time.AfterFunc(time.Until(deadline), func() {
		v.mu.Lock()
		v.changed.Broadcast()
		v.mu.Unlock()
	})
	defer timer.Stop()
	v.mu.Lock()
	defer v.mu.Unlock()
	for !done() {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		v.changed.Wait()
	}
	return true
}

// Filter selects runs to list. Zero fields do not filter.
type Filter struct {
	Statuses  []events.Status
	AgentType string
	Parent    string
	// ParentToolCallID selects the runs one tool call of a parent dispatched.
	ParentToolCallID string
	// IDContains selects the runs whose id contains it, ignoring case
	// (the web UI's search by run id).
	IDContains string
	// ForkedFrom selects the re-runs of this run (Run.ForkedFrom).
	ForkedFrom string
	Limit      int
	// Cursor continues a listing after the last run of the previous page.
	Cursor string
}

// Page is one page of a listing.
type Page struct {
	Runs  []Summary `json:"runs"`
	Total int       `json:"total"`
	Next  string    `json:"next,omitempty"`
}

// ErrBadCursor is returned by List for a cursor it did not hand out.
var ErrBadCursor = errors.New("bad cursor")

// List returns the runs the filter selects, newest first.
func (v *View) List(f Filter) (Page, error) {
	var after *position
	if f.Cursor != "" {
		p, err := decodeCursor(f.Cursor)
		if err != nil {
			return Page{}, err
		}
		after = &p
	}
	search := strings.ToLower(f.IDContains)
	v.mu.RLock()
	out := make([]Summary, 0, min(len(v.runs), 1024))
	for _, s := range v.runs {
		if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, s.Status) ||
			f.AgentType != "" && s.AgentType != f.AgentType ||
			f.Parent != "" && s.Parent != f.Parent ||
			f.ParentToolCallID != "" && s.ParentToolCallID != f.ParentToolCallID ||
			search != "" && !strings.Contains(strings.ToLower(s.ID), search) ||
			f.ForkedFrom != "" && (s.ForkedFrom == nil || s.ForkedFrom.RunID != f.ForkedFrom) {
			continue
		}
		out = append(out, s)
	}
	v.mu.RUnlock()
	slices.SortFunc(out, func(a, b Summary) int { return positionOf(a).compare(positionOf(b)) })
	total := len(out)
	if after != nil {
		i, _ := slices.BinarySearchFunc(out, *after, func(s Summary, p position) int { return positionOf(s).compare(p) })
		if i < len(out) && positionOf(out[i]) == *after {
			i++
		}
		out = out[i:]
	}
	page := Page{Runs: out, Total: total}
	if limit := cmp.Or(f.Limit, len(out)); len(out) > limit {
		page.Runs = out[:limit]
		page.Next = encodeCursor(positionOf(out[limit-1]))
	}
	return page, nil
}

// position orders runs newest first, then by id.
type position struct {
	created int64
	id      string
}

func positionOf(s Summary) position { return position{created: s.CreatedAt.UnixNano(), id: s.ID} }

func (p position) compare(q position) int {
	if c := cmp.Compare(q.created, p.created); c != 0 {
		return c
	}
	return strings.Compare(p.id, q.id)
}

func encodeCursor(p position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.created, 10) + ":" + p.id))
}

func decodeCursor(c string) (position, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return position{}, fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	ns, id, ok := strings.Cut(string(raw), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || events.ValidateID(id) != nil {
		return position{}, ErrBadCursor
	}
	return position{created: n, id: id}, nil
}
